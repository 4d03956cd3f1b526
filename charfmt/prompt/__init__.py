"""Prompting: the characters, their cards, scenes and lore, and the prompts a turn is rendered into.

``character`` (``Character``), ``cards`` (SillyTavern cards), ``scene`` (several characters),
``lorebook``, ``macros`` and ``userinput`` (the player's side) are what a turn is about;
``render`` writes it as the model's prompt, with its helpers: the budgeted Jinja sandbox
(``_sandbox``), escaping (``_prompt_escape``), the past exchanges that fit (``_token_fit``), a
character's parts of one prompt (``_card_prompt``); ``tokens`` and the estimates behind it
(``_token_estimate``, ``_token_bound``) count what a prompt costs.
"""
