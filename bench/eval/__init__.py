"""`make eval`: the agent's task results on a real model, side by side with a plain tool loop.

See docs/eval.md for the method and the latest table.
"""
