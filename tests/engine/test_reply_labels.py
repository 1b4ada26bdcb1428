"""A user's last word (``final``), its persona, and an agent turn's ``action_by`` and ``prompt``: logged, read back
from tapes (resume, verify), left out of other logs."""

from __future__ import annotations

import asyncio

from msgspec import UNSET

from dialogsim.engine.codec import encode
from dialogsim.engine.contracts import AgentReply, UserReply
from dialogsim.engine.events import AgentTurn, EpisodeEnded, UserTurn
from dialogsim.engine.runner import Batch, BatchSettings, Job, Logged
from dialogsim.engine.timing import Delay
from dialogsim.scenarios.builtin import BuiltinScenarios
from dialogsim.testing import MemoryLog, ScriptedAgent, ScriptedUser, simulate, strip_wall

PERSONA = {"name": "P", "patience": 0.5}
LINES = [UserReply(utterance="hello", persona=PERSONA), UserReply(utterance="more"),
         UserReply(utterance="bye", persona=PERSONA, end=True, final=True)]


class _Labelled(ScriptedAgent):
    """A scripted agent whose turns carry an action, who chose it and a prompt."""

    def respond(self, obs):
        reply = super().respond(obs)
        return AgentReply(utterance=reply.utterance, action="MID", action_by="manual", prompt="be brief")


class _Remote(ScriptedUser):
    """A user that cannot be re-run: read back from the tape."""

    deterministic = False


def _run(jobs, make_user, logged=None):
    log = MemoryLog()
    batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=make_user, make_agent=_Labelled, sink=log,
                  settings=BatchSettings(seed=2, think=Delay("uniform", 1, 4), latency=Delay("uniform", 0.1, 0.5)),
                  logged=logged)
    asyncio.run(batch.run(jobs))
    return log, batch


def test_a_final_reply_ends_the_episode_without_an_answer_and_labels_are_logged():
    """The user's last word is the episode's last turn; persona, action_by and prompt reach the log."""
    log, _ = _run([Job(0)], lambda: ScriptedUser(LINES))
    events = log.episode("e000000")
    turns = [e for e in events if type(e) in (UserTurn, AgentTurn)]
    assert [type(t).__name__ for t in turns] == ["UserTurn", "AgentTurn", "UserTurn", "AgentTurn", "UserTurn"]
    assert type(events[-1]) is EpisodeEnded and events[-1].turns == 5 and events[-1].outcome == "success"
    assert [t.persona for t in turns if type(t) is UserTurn] == [PERSONA, UNSET, PERSONA]
    assert {(t.action, t.action_by, t.prompt) for t in turns if type(t) is AgentTurn} == {("MID", "manual", "be brief")}


def test_other_logs_carry_none_of_the_new_fields():
    """Users and agents that set none of them log turns without the keys (logs of other runs are unchanged)."""
    for event in simulate(episodes=2):
        if type(event) in (UserTurn, AgentTurn):
            line = encode(event)
            assert b'"persona"' not in line and b'"action_by"' not in line and b'"prompt"' not in line


def test_a_read_back_user_ends_where_the_log_ends_it():
    """A user that is not re-run is read back: its last word (an end followed by the episode's end) ends the
    checked episode again without asking the agent; a resumed cut goes on and ends as the full run did."""
    full, _ = _run([Job(0)], lambda: _Remote(LINES))
    events = full.episode("e000000")
    _, batch = _run([Job(0)], lambda: _Remote(LINES), Logged({"e000000": events[-1].t}, {"e000000": events},
                                                             check={"e000000"}))
    assert not batch.diverged
    resumed, batch = _run([Job(0)], lambda: _Remote(LINES), Logged({}, {"e000000": events[:4]}))
    assert not batch.diverged
    assert strip_wall(events[:4] + resumed.episode("e000000")) == strip_wall(events)
