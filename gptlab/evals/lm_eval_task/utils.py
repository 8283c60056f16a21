"""lm-eval's HellaSwag preprocessing, for hellaswag_local.yaml (lm-eval imports this file by its path).

The prompt is `activity_label: ctx_a Ctx_b` (ctx_b's first letter upper-cased, the rest lower-cased, as
str.capitalize does) and each choice an ending; both are cleaned of WikiHow's markup the way lm-eval's `hellaswag`
task does, so the scores match what that task would give on the Hub's copy of the same rows.
"""
import re

_BRACKETED = re.compile(r"\[.*?\]")  # shortest [...] on one line: WikiHow's [title], [step], [substeps] markers


def preprocess(text):
    """Strip, turn " [title]" into ". ", drop every other [...], then one pass of double space -> single space
    (a single str.replace, as lm-eval does: three spaces become two)."""
    text = text.strip().replace(" [title]", ". ")
    return _BRACKETED.sub("", text).replace("  ", " ")


def process_doc(doc):
    """One row of hellaswag_val.jsonl -> the fields the YAML names: query, choices, gold."""
    context = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    return {"query": preprocess(doc["activity_label"] + ": " + context),
            "choices": [preprocess(ending) for ending in doc["endings"]],
            "gold": int(doc["label"])}


def process_docs(dataset):
    """lm-eval's process_docs hook: a datasets.Dataset in, the same rows with query/choices/gold added."""
    return dataset.map(process_doc)
