"""nkserde.errors.in_file: the one way an error is led by the file it
concerns, keeping what the error carries."""

import errno

from nkserde.errors import FileReadError, PeerLostError, RunMismatchError, TemplateMismatchError, in_file


def test_the_message_is_led_by_the_file_once_and_followed_by_the_hint():
    exc = in_file(TemplateMismatchError("state/parameters: shape (3,) vs (4,)"), "/d/a.nks", "; use strict=False")
    assert type(exc) is TemplateMismatchError
    assert str(exc) == "/d/a.nks: state/parameters: shape (3,) vs (4,); use strict=False"
    again = in_file(exc, "/d/a.nks")
    assert str(again) == str(exc)  # already named: not led twice
    other = in_file(TemplateMismatchError("/d/history-000001.nkh: bad record"), "/d/a.nks", unless="/d")
    assert str(other) == "/d/history-000001.nkh: bad record"


def test_an_operating_system_error_keeps_its_errno():
    exc = in_file(FileReadError(errno.EIO, "reading 10 bytes at 4 failed: Input/output error"), "/d/a.nks")
    assert isinstance(exc, OSError) and exc.errno == errno.EIO
    assert str(exc) == "/d/a.nks: reading 10 bytes at 4 failed: Input/output error"


def test_the_attributes_of_an_error_are_kept():
    exc = in_file(RunMismatchError("the run differs", directory="/d", changes=["h: 1 -> 2"]), "/d: init_from=/e")
    assert exc.directory == "/d" and exc.changes == ["h: 1 -> 2"]
    assert str(exc) == "/d: init_from=/e: the run differs"
    lost = in_file(PeerLostError("process 1 did not arrive", missing=[1]), "/d/a.nks")
    assert lost.missing == [1] and str(lost).startswith("/d/a.nks: process 1")
