"""gptlab.train.stop.StopSignals: what a SIGINT / SIGTERM does between training steps, outside them, and while a
checkpoint is written (signals sent to this very process)."""
import os
import signal
import sys
import time

import pytest

from gptlab.core.errors import StopRequested, run_cli
from gptlab.train import stop

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")


def send(signum):
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary


def test_between_steps_a_signal_only_raises_the_flag_and_the_end_of_the_steps_acts_on_it():
    with stop.StopSignals() as stopper:
        assert stop.installed() is stopper
        stopper.begin_steps()
        send(signal.SIGTERM)
        send(signal.SIGTERM)  # torchrun forwards the one its group got too
        send(signal.SIGINT)  # a SIGTERM wins
        assert stopper.requested == signal.SIGTERM
        with pytest.raises(StopRequested) as info:
            stopper.end_steps()
        assert info.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_ctrl_c_twice_stops_at_once_but_not_the_copy_torchrun_forwards(monkeypatch):
    monkeypatch.setattr(stop, "REPEAT_WINDOW_S", 0.2)
    with stop.StopSignals() as stopper:
        stopper.begin_steps()
        send(signal.SIGINT)
        send(signal.SIGINT)  # within the window: the same Ctrl-C
        time.sleep(0.3)
        with pytest.raises(StopRequested) as info:
            send(signal.SIGINT)
        assert info.value.signum == signal.SIGINT and isinstance(info.value, KeyboardInterrupt)


def test_outside_the_steps_a_signal_stops_at_once_except_while_a_checkpoint_is_written():
    with stop.StopSignals() as stopper:
        with pytest.raises(StopRequested):
            send(signal.SIGTERM)
    with stop.StopSignals() as stopper:
        written = []
        with pytest.raises(StopRequested):
            with stopper.deferred():
                send(signal.SIGINT)
                written.append("complete")  # the write goes on
        assert written == ["complete"]


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_run_cli_exits_128_plus_the_signal(signum, status, capsys):
    def main(argv):
        raise StopRequested(signum)

    with pytest.raises(SystemExit) as info:
        run_cli(main)
    assert info.value.code == status
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("script", ["judge", "train_tokenizer"])
def test_a_script_called_in_process_gives_back_the_callers_sigterm_handler(script, monkeypatch):
    """main() installs its own SIGTERM handler; one left behind would turn a later SIGTERM in the caller's
    process (a test worker, a notebook) into that script's stop."""
    import importlib
    import signal
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    module = importlib.import_module(script)

    def mine(signum, frame):
        pass
    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(BaseException):  # stops at its first check: no arguments
            module.main(["--no_such_flag"])
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)
