"""The shipped prompt templates (Markdown, rendered by agent.prompts)."""
