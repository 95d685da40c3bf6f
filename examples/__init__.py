"""Runnable examples (``dagnats dev --worker examples.agent_turn:handlers``)."""
