"""What every stage shares: errors.py (the one error for bad input, one `error:` line per CLI), cli.py (argparse
format, flag types), files.py (atomic writes, output checks, locks), distributed.py (rank, world size, device,
backend and timeouts from torchrun's environment)."""
