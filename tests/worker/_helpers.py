"""Task messages and history reads for worker tests: the journal tests' helpers, shared."""

from journal._helpers import WAIT_S, history, make_task, publish_task, uid, wait_history

__all__ = ["WAIT_S", "history", "make_task", "publish_task", "uid", "wait_history"]
