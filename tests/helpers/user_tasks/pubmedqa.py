"""PubMedQA (Jin et al. 2019): yes/no/maybe questions on abstracts. As lm-eval's pubmedqa."""
NAME = "pubmedqa"
HUB_REPO = "bigbio/pubmed_qa"
HUB_CONFIG = "pubmed_qa_labeled_fold0_source"
HUB_SPLIT = "test"
HUB_FILES = "pubmed_qa_labeled_fold0_source/test/*.parquet"
REVISION = "refs/convert/parquet"
SHA256 = None
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "pubmed_qa_labeled_fold0_source/train/*.parquet"
FEWSHOT_EXCLUDE_SELF = False  # its test_split is another split
COLUMNS = {"QUESTION": str, "CONTEXTS": list, "final_decision": str}
RANDOM_BASELINE = "uniform"
CORE = False


def render(row):
    choices = ["yes", "no", "maybe"]
    return {"context": "Abstract: {}\nQuestion: {}\nAnswer:".format("\n".join(row["CONTEXTS"]), row["QUESTION"]),
            "choices": choices, "gold": choices.index(row["final_decision"])}
