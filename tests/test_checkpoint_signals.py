"""nkserde.checkpoint.job.signals: caught signals are recorded, Ctrl-C deferred
while busy, previous handlers restored."""

import os
import signal
import threading

import pytest

from nkserde.checkpoint.job.signals import SignalCatcher


def test_a_caught_signal_is_recorded_and_the_handler_restored():
    before = signal.getsignal(signal.SIGUSR1)
    with SignalCatcher((signal.SIGUSR1,)) as catcher:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert catcher.received == signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) is before
    assert catcher.received is None


def test_the_previous_python_handler_still_runs():
    seen = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))
    try:
        with SignalCatcher((signal.SIGUSR1,)) as catcher:
            os.kill(os.getpid(), signal.SIGUSR1)
        assert catcher.received is None  # forgotten on restore
        assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_ctrl_c_while_busy_is_deferred_and_otherwise_immediate(default_sigint):
    busy = [True]
    with SignalCatcher((signal.SIGUSR1,), defer_sigint=True, busy=lambda: busy[0]) as catcher:
        os.kill(os.getpid(), signal.SIGINT)
        assert catcher.interrupt_pending
        busy[0] = False
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_users_sigint_handler_is_left_alone():
    def mine(signum, frame):
        pass

    old = signal.signal(signal.SIGINT, mine)
    try:
        with SignalCatcher((), defer_sigint=True, busy=lambda: True):
            assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, old)


def test_outside_the_main_thread_nothing_is_installed():
    before = signal.getsignal(signal.SIGUSR1)
    result = {}

    def other():
        catcher = SignalCatcher((signal.SIGUSR1,)).install()
        result["installed"] = catcher.installed
        result["handler"] = signal.getsignal(signal.SIGUSR1)
        catcher.restore()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert result == {"installed": False, "handler": before}
