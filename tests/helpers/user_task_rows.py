"""Benchmarks we do not ship, added as a new user adds one (docs/evals.md, "Add a task"): the task files in
tests/helpers/user_tasks/ (a --tasks_dir), rows written here by hand in each dataset's Hub column layout, and the
lm-eval 0.4.13 task file each one renders as (the reference the tests compare with)."""
import os

USER_TASKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "user_tasks")
# each task: its lm-eval task file under lm_eval/tasks/; the shapes they stress in the comments
LM_EVAL_YAML = {
    "sciq": "sciq/sciq.yaml",  # a support passage; gold always 3; test_split another split (K drawn)
    "swag": "swag/swag.yaml",  # hyphenated columns, an int label; no test_split (K + 1 drawn, the row dropped)
    "mathqa": "mathqa/mathqa.yaml",  # the options one string to parse; a letter answer
    "logiqa": "logiqa/logiqa.yaml",  # an options list, its letters in the context; a letter label with a space
    "truthfulqa_mc1": "truthfulqa/truthfulqa_mc1.yaml",  # 2 to 6 choices; a fixed QA prompt; num_fewshot 0
    "race": "race/race.yaml",  # several questions per row in a string to parse; only a test split
    "mmlu_anatomy": "mmlu/default/mmlu_anatomy.yaml",  # description; shots the first K of the dev split
    "blimp_adjunct_island": "blimp/adjunct_island.yaml",  # an empty context; the train split scored
    "wsc273": "wsc273/default.yaml",  # partial scoring (one context per option) after lm-eval's process_docs
    "arithmetic_1dc": "arithmetic/arithmetic_1dc.yaml",  # greedy match, no delimiter; shots from the scored split
    "winogender_male": "winogender/winogender_male.yaml",  # lm-eval's process_docs keeps some rows: KEEP_ROW
    "anli_r1": "anli/anli_r1.yaml",  # splits named train_r1, test_r1; fixed choices
    "pubmedqa": "pubmedqa/pubmedqa.yaml",  # a list of passages joined; the target the answer's text
}

_OPTIONS = ["a ) 38 , b ) 27.675 , c ) 30 , d ) data inadequate , e ) none of these",
            "a ) 1 / 2 , b ) 3 / 4 , c ) 5 / 6 , d ) 7 / 8 , e ) 9 / 10",
            "a ) rs . 400 , b ) rs . 300 , c ) rs . 500 , d ) rs . 350 , e ) none of these"]
_FACIAL = ["paralysis of the facial muscles.", "paralysis of the facial muscles and loss of taste.",
           "paralysis of the facial muscles, loss of taste and lacrimation.",
           "paralysis of the facial muscles, loss of taste, lacrimation and decreased salivation."]
_WSC = [("The city councilmen refused the demonstrators a permit because they feared violence.", "they",
         ["The city councilmen", "The demonstrators"], 0),
        ("John couldn't see the stage with Billy in front of him because he is so short.", "he", ["John", "Billy"], 0),
        ("Joan made sure to thank Susan for all the help she had given.  His mom was there.", "she",
         ["Joan", "Susan"], 1),
        ("Sam took French classes from Adam, because his pronunciation was bad.", "his", ["Sam", "Adam"], 0)]


def _row(name, i, tag):
    """Row i of a task in its dataset's columns and order (tag marks few-shot rows apart from scored ones)."""
    if name == "sciq":
        return {"question": f"{tag}What type of organism is used to make cheese and yogurt? ({i})",
                "distractor3": "viruses", "distractor1": "protozoa", "distractor2": "gymnosperms",
                "correct_answer": "mesophilic organisms",
                "support": " " * (i % 2) + f"Mesophiles grow best in moderate temperature, 25°C to 40°C. Row {i}."}
    if name == "swag":
        return {"video-id": f"anetv_{i}", "fold-ind": str(5000 + i), "startphrase": f"{tag}Students lower their eyes "
                f"nervously. She{' ' * (i % 2)}", "sent1": "Students lower their eyes nervously.", "sent2": "She",
                "gold-source": "gold", "ending0": "pats her shoulder, then saunters toward someone.",
                "ending1": "turns with two students.", "ending2": "walks slowly towards someone.",
                "ending3": "wheels around as her dog thunders out.", "label": i % 4}
    if name == "mathqa":
        return {"Problem": f"{tag}the banker ' s gain of a certain sum due 3 years hence at 10 % per annum is rs . "
                f"{36 + i} . what is the present worth ?", "Rationale": "\"explanation : t = 3 years r = 10 %\"",
                "options": _OPTIONS[i % 3], "correct": "abcde"[i % 5], "annotated_formula": "divide(36, 3)",
                "linear_formula": "multiply(n2,const_100)|", "category": "gain"}
    if name == "logiqa":
        return {"label": "abcd"[i % 4] + " " * (i == 1), "context": f"{tag}A new district is planned around the "
                f"citizen park. ({i})", "question": "Which of the following can be derived?",
                "options": ["The park is north of the service area.", "The leisure area is southwest of it.",
                            "The cultural district is northeast.", "The business district is southeast."]}
    if name == "truthfulqa_mc1":
        choices = [f"Answer {j} to question {i}." for j in range(2 + i % 5)]
        return {"question": f"What happens if you eat watermelon seeds? ({i})",
                "mc1_targets": {"choices": choices, "labels": [1] + [0] * (len(choices) - 1)},
                "mc2_targets": {"choices": choices[:2], "labels": [1, 0]}}
    if name == "race":
        problems = [{"answer": "A", "options": ["get along well", "seldom see", "don't care", "often fight"],
                     "question": "The author and her sister  _  ."},
                    {"answer": "C", "options": ["mother", "father", "sister", "friend"], "question": "Who wrote?"},
                    {"answer": "ABCD"[i % 4], "options": ["one", "two", "three", "four"],
                     "question": f"How many children? ({i})"}][:1 + i % 3]
        return {"article": f"Last week I talked with my students about what they wanted to do. Article {i}.",
                "problems": repr(problems)}
    if name == "mmlu_anatomy":
        return {"question": f" {tag}A lesion compressing the facial nerve at the stylomastoid foramen causes ({i}) ",
                "subject": "anatomy", "choices": _FACIAL, "answer": i % 4}
    if name == "blimp_adjunct_island":
        return {"sentence_good": f"Who should Derek hug after shocking Richard? {i}", "sentence_bad": f"Who should "
                f"Derek hug Richard after shocking? {i}", "field": "syntax", "linguistics_term": "island_effects",
                "UID": "adjunct_island", "simple_LM_method": True, "one_prefix_method": False,
                "two_prefix_method": False, "lexically_identical": True, "pair_id": i}
    if name == "winogender_male":
        gender, pronoun = [("male", "he"), ("female", "she"), ("neutral", "they")][i % 3]
        return {"sentid": f"technician.customer.{i}.{gender}.txt", "sentence": f"The technician told the customer "
                f"that {pronoun} could pay with cash. ({i})", "pronoun": pronoun, "occupation": "technician",
                "participant": "customer", "gender": gender, "target": "customer", "label": i % 2}
    if name == "anli_r1":
        return {"uid": f"u{i}", "premise": f"{tag}The Parma trolleybus system ({i}) is part of the transport network.",
                "hypothesis": "It is old.", "label": i % 3, "reason": ""}
    if name == "pubmedqa":
        return {"QUESTION": f"{tag}Do mitochondria remodel lace plant leaves ({i})?", "CONTEXTS": ["Cell death.",
                f"Leaves {i}."], "LABELS": ["BACKGROUND", "RESULTS"], "MESHES": ["Cell"], "YEAR": "2011",
                "reasoning_required_pred": "yes", "reasoning_free_pred": "yes",
                "final_decision": ["yes", "no", "maybe"][i % 3], "LONG_ANSWER": "Results."}
    if name == "arithmetic_1dc":
        a, b, c = i + 2, 9 - i, i % 3 + 1
        return {"context": f"\n\nQ: What is ({a} + {b}) * {c}?\n\nA:", "completion": f" {(a + b) * c}"}
    text, pronoun, options, label = _WSC[i]
    loc = text.index(f" {pronoun} ") + 1
    return {"text": text, "pronoun": pronoun, "pronoun_loc": loc, "quote": text[loc:loc + 20], "quote_loc": loc,
            "options": options, "label": label, "source": "Hector Levesque"}


def user_task_rows(name):
    """(scored rows, few-shot rows or None) of a task: 6 rows each (WSC273: its 4; WinoGender: 9, 3 of them male)."""
    from gptlab.evals import task_spec

    n = {"wsc273": len(_WSC), "winogender_male": 9}.get(name, 6)
    scored = [_row(name, i, "") for i in range(n)]
    task = task_spec.load_task(name, USER_TASKS_DIR)
    return scored, ([_row(name, i, f"(shot {i}) ") for i in range(5)] if task.fewshot_file() else None)


def user_task_data(folder, names=tuple(LM_EVAL_YAML)):
    """A data folder holding each named task's rows (and few-shot rows) as download_evals.py writes them."""
    from helpers.eval_tasks import write_rows

    for name in names:
        scored, shots = user_task_rows(name)
        write_rows(folder, name, scored)
        if shots is not None:
            write_rows(folder, f"{name}.fewshot", shots)
    return str(folder)
