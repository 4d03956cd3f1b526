"""Old home of ``charfmt.prompt.render``: a door kept so users' ``charfmt.render`` imports still work.

The module moved into the prompting wing (issue 41), which keeps this public path.
Import from ``charfmt.prompt.render``; nothing inside the package imports this door.
"""

from charfmt.prompt.render import (
    ESTIMATE,
    Extra,
    RenderedTurn,
    Safe,
    TemplateError,
    at_depth,
    bound_tokens,
    chat_turns,
    estimate_tokens,
    history_reply,
    lore_extras,
    lore_in_system,
    post_history,
    render_messages,
    render_request,
    render_system,
    render_text,
    render_text_turn,
    render_turn,
    render_user_block,
    system_of,
    turn_message,
)

__all__ = [
    "ESTIMATE",
    "Extra",
    "RenderedTurn",
    "Safe",
    "TemplateError",
    "at_depth",
    "bound_tokens",
    "chat_turns",
    "estimate_tokens",
    "history_reply",
    "lore_extras",
    "lore_in_system",
    "post_history",
    "render_messages",
    "render_request",
    "render_system",
    "render_text",
    "render_text_turn",
    "render_turn",
    "render_user_block",
    "system_of",
    "turn_message",
]
