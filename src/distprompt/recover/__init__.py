"""Recovering what the model saw: tokenizer loading and decoding (``decode``), the chat template
learned from the tokenizer (``template``), chat turns (``turns``), and the tokenizer-vs-data
checks (``checks``).
"""
