"""refs.bib: the works a paper made from these runs builds on. The fixed ones (the architecture's sources, the
optimizer, the data, each eval task a run recorded) and those the runs' model and training sources credit in their
comments (CREDITS: a pattern of the credit's text → its keys; an arXiv number not listed becomes an entry of its
own), so a trick added with its credit is cited without editing this file."""
import re

ENTRIES = {
    "jordan2024moddednanogpt": """@misc{jordan2024moddednanogpt,
  author = {Keller Jordan and others},
  title = {modded-nanogpt: Speedrunning the {NanoGPT} baseline},
  year = {2024},
  howpublished = {\\url{https://github.com/KellerJordan/modded-nanogpt}}
}""",
    "karpathy2022nanogpt": """@misc{karpathy2022nanogpt,
  author = {Andrej Karpathy},
  title = {{nanoGPT}},
  year = {2022},
  howpublished = {\\url{https://github.com/karpathy/nanoGPT}}
}""",
    "radford2019language": """@techreport{radford2019language,
  author = {Alec Radford and Jeffrey Wu and Rewon Child and David Luan and Dario Amodei and Ilya Sutskever},
  title = {Language Models are Unsupervised Multitask Learners},
  institution = {OpenAI},
  year = {2019}
}""",
    "jordan2024muon": """@misc{jordan2024muon,
  author = {Keller Jordan and Yuchen Jin and Vlado Boza and Jiacheng You and Franz Cesista and Laker Newhouse and
            Jeremy Bernstein},
  title = {Muon: An optimizer for hidden layers in neural networks},
  year = {2024},
  howpublished = {\\url{https://kellerjordan.github.io/posts/muon/}}
}""",
    "penedo2024fineweb": """@inproceedings{penedo2024fineweb,
  author = {Guilherme Penedo and Hynek Kydl{\\'\\i}{\\v{c}}ek and Loubna Ben Allal and Anton Lozhkov and Margaret
            Mitchell and Colin Raffel and Leandro Von Werra and Thomas Wolf},
  title = {The {FineWeb} Datasets: Decanting the Web for the Finest Text Data at Scale},
  booktitle = {Advances in Neural Information Processing Systems, Datasets and Benchmarks Track},
  year = {2024}
}""",
    "sennrich2016neural": """@inproceedings{sennrich2016neural,
  author = {Rico Sennrich and Barry Haddow and Alexandra Birch},
  title = {Neural Machine Translation of Rare Words with Subword Units},
  booktitle = {Proceedings of the 54th Annual Meeting of the Association for Computational Linguistics},
  year = {2016}
}""",
    "kingma2015adam": """@inproceedings{kingma2015adam,
  author = {Diederik P. Kingma and Jimmy Ba},
  title = {Adam: A Method for Stochastic Optimization},
  booktitle = {International Conference on Learning Representations},
  year = {2015}
}""",
    "welch1947generalization": """@article{welch1947generalization,
  author = {B. L. Welch},
  title = {The Generalization of `{Student's}' Problem when Several Different Population Variances are Involved},
  journal = {Biometrika},
  volume = {34},
  pages = {28--35},
  year = {1947}
}""",
    "holm1979simple": """@article{holm1979simple,
  author = {Sture Holm},
  title = {A Simple Sequentially Rejective Multiple Test Procedure},
  journal = {Scandinavian Journal of Statistics},
  volume = {6},
  number = {2},
  pages = {65--70},
  year = {1979}
}""",
    "zheng2023judging": """@inproceedings{zheng2023judging,
  author = {Lianmin Zheng and Wei-Lin Chiang and Ying Sheng and Siyuan Zhuang and Zhanghao Wu and Yonghao Zhuang and
            Zi Lin and Zhuohan Li and Dacheng Li and Eric P. Xing and Hao Zhang and Joseph E. Gonzalez and Ion Stoica},
  title = {Judging {LLM}-as-a-Judge with {MT-Bench} and Chatbot Arena},
  booktitle = {Advances in Neural Information Processing Systems, Datasets and Benchmarks Track},
  year = {2023}
}""",
    # the tricks model.py and train_gpt.py credit
    "so2021primer": """@inproceedings{so2021primer,
  author = {David R. So and Wojciech Ma{\\'n}ke and Hanxiao Liu and Zihang Dai and Noam Shazeer and Quoc V. Le},
  title = {Primer: Searching for Efficient Transformers for Language Modeling},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2021}
}""",
    "su2024roformer": """@article{su2024roformer,
  author = {Jianlin Su and Murtadha Ahmed and Yu Lu and Shengfeng Pan and Wen Bo and Yunfeng Liu},
  title = {{RoFormer}: Enhanced Transformer with Rotary Position Embedding},
  journal = {Neurocomputing},
  volume = {568},
  year = {2024}
}""",
    "henry2020query": """@inproceedings{henry2020query,
  author = {Alex Henry and Prudhvi Raj Dachapally and Shubham Shantaram Pawar and Yuxuan Chen},
  title = {Query-Key Normalization for Transformers},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2020},
  year = {2020}
}""",
    "zhang2019root": """@inproceedings{zhang2019root,
  author = {Biao Zhang and Rico Sennrich},
  title = {Root Mean Square Layer Normalization},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2019}
}""",
    "gemmateam2024gemma2": """@misc{gemmateam2024gemma2,
  author = {{Gemma Team}},
  title = {Gemma 2: Improving Open Language Models at a Practical Size},
  year = {2024},
  howpublished = {arXiv:2408.00118}
}""",
    "yang2022tensor": """@misc{yang2022tensor,
  author = {Greg Yang and Edward J. Hu and Igor Babuschkin and Szymon Sidor and Xiaodong Liu and David Farhi and
            Nick Ryder and Jakub Pachocki and Weizhu Chen and Jianfeng Gao},
  title = {Tensor Programs {V}: Tuning Large Neural Networks via Zero-Shot Hyperparameter Transfer},
  year = {2022},
  howpublished = {arXiv:2203.03466}
}""",
    "hagele2024scaling": """@inproceedings{hagele2024scaling,
  author = {Alexander H{\\"a}gele and Elie Bakouch and Atli Kosson and Loubna Ben Allal and Leandro Von Werra and
            Martin Jaggi},
  title = {Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2024},
  note = {arXiv:2405.18392}
}""",
    "dong2024flex": """@misc{dong2024flex,
  author = {Juechu Dong and Boyuan Feng and Driss Guessous and Yanbo Liang and Horace He},
  title = {Flex Attention: A Programming Model for Generating Optimized Attention Kernels},
  year = {2024},
  howpublished = {arXiv:2412.05496}
}""",
    "ronneberger2015unet": """@inproceedings{ronneberger2015unet,
  author = {Olaf Ronneberger and Philipp Fischer and Thomas Brox},
  title = {{U-Net}: Convolutional Networks for Biomedical Image Segmentation},
  booktitle = {Medical Image Computing and Computer-Assisted Intervention (MICCAI)},
  year = {2015}
}""",
    # the eval tasks (gptlab/evals/tasks/<name>.py)
    "zellers2019hellaswag": """@inproceedings{zellers2019hellaswag,
  author = {Rowan Zellers and Ari Holtzman and Yonatan Bisk and Ali Farhadi and Yejin Choi},
  title = {{HellaSwag}: Can a Machine Really Finish Your Sentence?},
  booktitle = {Proceedings of the 57th Annual Meeting of the Association for Computational Linguistics},
  year = {2019}
}""",
    "clark2018think": """@misc{clark2018think,
  author = {Peter Clark and Isaac Cowhey and Oren Etzioni and Tushar Khot and Ashish Sabharwal and Carissa Schoenick
            and Oyvind Tafjord},
  title = {Think you have Solved Question Answering? Try {ARC}, the {AI2} Reasoning Challenge},
  year = {2018},
  howpublished = {arXiv:1803.05457}
}""",
    "clark2019boolq": """@inproceedings{clark2019boolq,
  author = {Christopher Clark and Kenton Lee and Ming-Wei Chang and Tom Kwiatkowski and Michael Collins and
            Kristina Toutanova},
  title = {{BoolQ}: Exploring the Surprising Difficulty of Natural Yes/No Questions},
  booktitle = {Proceedings of NAACL-HLT},
  year = {2019}
}""",
    "talmor2019commonsenseqa": """@inproceedings{talmor2019commonsenseqa,
  author = {Alon Talmor and Jonathan Herzig and Nicholas Lourie and Jonathan Berant},
  title = {{CommonsenseQA}: A Question Answering Challenge Targeting Commonsense Knowledge},
  booktitle = {Proceedings of NAACL-HLT},
  year = {2019}
}""",
    "roemmele2011choice": """@inproceedings{roemmele2011choice,
  author = {Melissa Roemmele and Cosmin Adrian Bejan and Andrew S. Gordon},
  title = {Choice of Plausible Alternatives: An Evaluation of Commonsense Causal Reasoning},
  booktitle = {AAAI Spring Symposium on Logical Formalizations of Commonsense Reasoning},
  year = {2011}
}""",
    "paperno2016lambada": """@inproceedings{paperno2016lambada,
  author = {Denis Paperno and Germ{\\'a}n Kruszewski and Angeliki Lazaridou and Ngoc Quan Pham and Raffaella
            Bernardi and Sandro Pezzelle and Marco Baroni and Gemma Boleda and Raquel Fern{\\'a}ndez},
  title = {The {LAMBADA} dataset: Word prediction requiring a broad discourse context},
  booktitle = {Proceedings of the 54th Annual Meeting of the Association for Computational Linguistics},
  year = {2016}
}""",
    "mihaylov2018can": """@inproceedings{mihaylov2018can,
  author = {Todor Mihaylov and Peter Clark and Tushar Khot and Ashish Sabharwal},
  title = {Can a Suit of Armor Conduct Electricity? A New Dataset for Open Book Question Answering},
  booktitle = {Proceedings of EMNLP},
  year = {2018}
}""",
    "bisk2020piqa": """@inproceedings{bisk2020piqa,
  author = {Yonatan Bisk and Rowan Zellers and Ronan Le Bras and Jianfeng Gao and Yejin Choi},
  title = {{PIQA}: Reasoning about Physical Commonsense in Natural Language},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence},
  year = {2020}
}""",
    "sap2019social": """@inproceedings{sap2019social,
  author = {Maarten Sap and Hannah Rashkin and Derek Chen and Ronan Le Bras and Yejin Choi},
  title = {Social {IQa}: Commonsense Reasoning about Social Interactions},
  booktitle = {Proceedings of EMNLP-IJCNLP},
  year = {2019}
}""",
    "sakaguchi2020winogrande": """@inproceedings{sakaguchi2020winogrande,
  author = {Keisuke Sakaguchi and Ronan Le Bras and Chandra Bhagavatula and Yejin Choi},
  title = {{WinoGrande}: An Adversarial Winograd Schema Challenge at Scale},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence},
  year = {2020}
}""",
}

# Every paper built on gptlab's runs: the architecture's lineage, its optimizer, its data, its tokenizer, its tests.
ALWAYS = ("jordan2024moddednanogpt", "karpathy2022nanogpt", "radford2019language", "jordan2024muon",
          "penedo2024fineweb", "sennrich2016neural", "welch1947generalization", "holm1979simple")
# An eval task's NAME (gptlab/evals/tasks/<name>.py) → its paper.
TASKS = {"hellaswag": "zellers2019hellaswag", "arc_easy": "clark2018think", "arc_challenge": "clark2018think",
         "boolq": "clark2019boolq", "commonsense_qa": "talmor2019commonsenseqa", "copa": "roemmele2011choice",
         "lambada": "paperno2016lambada", "openbookqa": "mihaylov2018can", "piqa": "bisk2020piqa",
         "social_iqa": "sap2019social", "winogrande": "sakaguchi2020winogrande"}
# What a credit in the source names (case-insensitive) → the keys it cites.
CREDITS = ((r"modded-nanogpt|record #?\d+|keller jordan|@youjiacheng", ("jordan2024moddednanogpt",)),
           (r"\bmuon\b|newton[-–\s]*schulz", ("jordan2024muon",)),
           (r"\bprimer\b|so et al", ("so2021primer",)),
           (r"\brotary\b|\brope\b", ("su2024roformer",)),
           (r"qk-?norm", ("henry2020query",)),
           (r"rmsnorm", ("zhang2019root",)),
           (r"gemma", ("gemmateam2024gemma2",)),
           (r"\bmu-?p\b|zero readout", ("yang2022tensor",)),
           (r"trapezoidal|2405\.18392|warmup[- ]stable[- ]decay", ("hagele2024scaling",)),
           (r"\badam\b", ("kingma2015adam",)),
           (r"flex\s?attention", ("dong2024flex",)),
           (r"u-net", ("ronneberger2015unet",)),
           (r"\bgpt-2\b", ("radford2019language",)),
           (r"nanogpt\b", ("karpathy2022nanogpt",)))
ARXIV = re.compile(r"arXiv[:\s]*(\d{4}\.\d{4,5})", re.I)
# A comment or docstring sentence that credits someone (besides the patterns above): "et al.", "(Name 2024)",
# "@handle", "arXiv".
CREDIT_MARK = re.compile(r"et al\b|\([^()]*\b(?:19|20)\d\d\b[^()]*\)|(?<![\w.])@[A-Za-z]\w+|arXiv", re.I)


def _arxiv_key(number):
    return "arxiv" + number.replace(".", "_")


def _known_arxiv():
    return {m.group(1): key for key, text in ENTRIES.items() for m in ARXIV.finditer(text)}


def cite_keys(text):
    """The keys a credit's text cites (in CREDITS' order), and one per arXiv number it gives."""
    keys = [k for pattern, ks in CREDITS if re.search(pattern, text, re.I) for k in ks]
    known = _known_arxiv()
    keys += [known.get(m.group(1), _arxiv_key(m.group(1))) for m in ARXIV.finditer(text)]
    return list(dict.fromkeys(keys))


def is_credit(text):
    return bool(CREDIT_MARK.search(text)) or bool(cite_keys(text))


def task_key(task):
    """The key of an eval task's paper; a task not in TASKS gets an entry of its own (see entry())."""
    return TASKS.get(task, f"task_{re.sub(r'[^A-Za-z0-9]', '_', task)}")


def entry(key, task_docs=None):
    """The BibTeX entry of `key`: ENTRIES', an arXiv number's, or an unknown task's (its spec's first line)."""
    if key in ENTRIES:
        return ENTRIES[key]
    if key.startswith("arxiv"):
        number = key[len("arxiv"):].replace("_", ".")
        return (f"@misc{{{key},\n  title = {{arXiv:{number}}},\n  howpublished = {{\\url{{https://arxiv.org/abs/"
                f"{number}}}}},\n  note = {{cited in the run's source; complete this entry}}\n}}")
    what = (task_docs or {}).get(key, key)
    clean = re.sub(r"[{}\\%#&$^_~]", " ", what)
    return f"@misc{{{key},\n  title = {{{clean}}},\n  note = {{an eval task gptlab ran; complete this entry}}\n}}"


def render(keys, task_docs=None):
    """refs.bib with these keys' entries, in the order given, each once."""
    return "\n\n".join(entry(k, task_docs) for k in dict.fromkeys(keys)) + "\n"


def task_title(task):
    """The first line of an eval task's spec (gptlab/evals/tasks/<task>.py's docstring, read, not imported)."""
    import ast
    import os

    from gptlab.evals import tasks as task_folder

    if not re.fullmatch(r"\w+", task):  # a name from a run's records, not a path
        return task
    path = os.path.join(os.path.dirname(task_folder.__file__), f"{task}.py")
    try:
        with open(path, encoding="utf-8") as f:
            doc = ast.get_docstring(ast.parse(f.read())) or task
    except (OSError, SyntaxError, ValueError):
        return task
    return doc.splitlines()[0][:200]
