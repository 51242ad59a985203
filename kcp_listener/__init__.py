"""KCP event intake: the wire contract shared with the agent, and the authenticated listener app."""
