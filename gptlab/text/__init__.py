"""Text in: the documents a tokenizer trains on and the shards are cut from (the Hub, streamed, or local files)."""
