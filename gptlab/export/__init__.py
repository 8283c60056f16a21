"""Using a trained model: generate.py (sampling, streamed text; sample.py), hf_folder.py and modeling_gptlab.py (the
Hugging Face folder: the checkpoint's model.py with a thin transformers wrapper; export_hf.py)."""
