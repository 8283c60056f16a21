"""Judged comparisons of two models' generated text (judge.py): both runs sample the same prompts
(sampling.py), an LLM judge behind an OpenAI-compatible chat-completions API compares each pair in both orders
(api.py, verdicts.py), and the win rate, its bootstrap interval and a sign test come from the saved verdicts
(verdicts.py); session.py owns the files under RUN/judge/ and the resume. The last stage: it samples with
gptlab.export's generation loop. docs/judge.md."""
