"""Live agents over HTTP: the dialogsim/1 and OpenAI chat-completions agents, their client, the agent server and loopback test servers."""
