"""The eval_csv projection: the real files' columns, JSON cells, and a CSV that csv and pandas read alike."""

from __future__ import annotations

import csv
import io
import json

import pytest

from dialogsim.engine.contracts import Scenario
from dialogsim.engine.events import Usage
from dialogsim.scenarios.builtin import BuiltinScenarios, SCENARIOS
from dialogsim.scenarios.evals.episode import RunFacts, episode_record
from dialogsim.scenarios.evals.eval_csv import COLUMNS, encode_csv, episode_row
from dialogsim.testing import AgentReply, ScriptedAgent, simulate

FACTS = RunFacts(epoch_ns=1_768_149_365_550_128_896, model="m")

# text that a CSV writer must quote, and that pandas would otherwise read as NaN or a number
AWKWARD = ['He said "yes", then left.\nNew line', "NA", "null", "  padded  ", "1e5", "naïve café ☕", "a\r\nb", ""]


class AwkwardAgent(ScriptedAgent):
    """Says the awkward texts in turn, with usage."""

    def start(self, ctx):
        super().start(ctx)
        self.said = 0

    def respond(self, obs):
        reply = super().respond(obs)
        if reply.tool_calls:
            return reply
        self.said += 1
        return AgentReply(utterance=AWKWARD[self.said % len(AWKWARD)], end=reply.end,
                          usage=Usage(input_tokens=10, output_tokens=self.said))


@pytest.fixture(scope="module")
def rows():
    """Rows of four episodes: weather, a booking with three calls, small talk, and awkward user text."""
    odd = Scenario(id="awkward", kind="scripted", data={"user": AWKWARD, "agent": [{"utterance": "x"}] * 8})
    scenarios = BuiltinScenarios(scenarios=[*SCENARIOS, odd])
    log = simulate(scenarios=scenarios, agent=AwkwardAgent, episodes=4, run_id="run-csv")
    return [episode_row(episode_record(log.episode(f"e00000{i}")), FACTS) for i in range(4)]


def test_the_columns_are_the_real_files(real_file):
    """Every column of the real simulation CSV, in its order (question_id, listed by FORMATS.md, added)."""
    with open(real_file("customer_service_simulation_run.csv"), newline="", encoding="utf-8") as f:
        real = next(csv.reader(f))
    assert [c for c in COLUMNS if c in real] == real
    assert set(COLUMNS) - set(real) == {"question_id"}


def test_cells_hold_the_episode(rows):
    """Metrics, JSON cells and empty cells where the run has no source."""
    row = dict(zip(COLUMNS, rows[1]))  # the booking
    assert row["eval_id"] == "restaurant-booking" and row["session_id"] == "run-csv/e000001"
    assert (row["metric.tool_calls"], row["metric.tool_errors"], row["metric.turn_count"]) == ("3", "0", "5")
    assert json.loads(row["metric.unique_tools"]) == ["Restaurants_1__FindRestaurants",
                                                      "Restaurants_1__ReserveRestaurant"]
    assert row["metric.total_tokens"] == str(5 * 10 + sum(range(1, 6)))
    for empty in ("score.hallucinations_v1", "score.safety_v1", "system_instructions", "session_state",
                  "question_id"):
        assert row[empty] == "", empty
    extracted = json.loads(row["extracted_data"])
    assert set(extracted) == {"sub_agent_trace", "state_variables", "tool_interactions"}
    assert extracted["tool_interactions"][1] == {"tool_name": "Restaurants_1__ReserveRestaurant", "input_arguments": {
        "restaurant_name": "Sino", "time": "19:00", "party_size": "2"}}
    assert extracted["state_variables"] is None  # the agent never reported a state
    assert json.loads(row["user_inputs"])[0] == "Find me a Thai place in San Jose."
    assert row["trace_summary"].startswith("User: Find me a Thai place in San Jose.\nagent: ")
    assert row["final_response"] == json.loads(row["sub_agent_trace"])[-1]["text_response"]
    spans = json.loads(row["session_trace"])
    assert set(spans[0]) == {"name", "span_id", "trace_id", "parent_span_id", "start_time", "end_time", "attributes"}
    assert sum(s["name"].startswith("execute_tool") for s in spans) == 3
    assert row["timestamp"].startswith("2026-01-11T16:36:") and len(row["timestamp"]) == 26
    steps = json.loads(row["custom_extract"])
    assert steps[1]["tool_calls"][0]["name"] == "Restaurants_1__FindRestaurants" and steps[0]["role"] == "user"


def test_python_csv_reads_back_every_cell(rows):
    """The written CSV reads back cell for cell with the csv module (quotes, newlines, CR, non-ASCII)."""
    data = encode_csv(iter(rows))
    back = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    assert back == [COLUMNS, *rows]
    assert json.loads(dict(zip(COLUMNS, back[4]))["user_inputs"]) == AWKWARD


def test_pandas_reads_the_csv_as_the_csv_module_does(rows, tmp_path):
    """pandas (strings, no NA guessing) reads the same table as the csv module."""
    pd = pytest.importorskip("pandas")
    path = tmp_path / "run.csv"
    path.write_bytes(encode_csv(iter(rows)))
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    with open(path, newline="", encoding="utf-8") as f:
        assert frame.to_dict("records") == list(csv.DictReader(f))
    assert list(frame.columns) == COLUMNS
