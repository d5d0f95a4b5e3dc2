"""Which log directories have failed: Kafka's LogDirFailureChannel.

Kafka's rule (LogDirFailureChannel, LocalLog.maybeHandleIOException, LogManager
.handleLogDirFailure): an I/O error on any file of a log directory (an append, a roll, a
flush, a truncation, a checkpoint, a read) takes the whole directory offline at once. From
then on nothing in it is read or written again by this process: every operation on a log
there fails with KAFKA_STORAGE_ERROR before it touches a file, so nothing held in memory
(log end offsets, producer state, indexes) can claim more, or other, than the files hold.
What the files hold is trusted again only after the broker restarts and recovers them
(no clean-shutdown marker: every segment past the recovery point is re-read with its CRC).

This object is only the record of failed directories and the wake-up of whoever acts on
them; the broker decides what a failure means (see BrokerServer._handle_log_dir_failures:
with no live directory left it halts, as Kafka's LogManager does). No I/O, no trio.
"""

import logging
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("storage.log_dir_failure")


class LogDirFailureChannel:
    """The failed log directories of one broker, and who to tell when one fails."""

    def __init__(self) -> None:
        self._offline: dict[Path, str] = {}
        self._listeners: list[Callable[[Path, str], None]] = []

    def add_listener(self, listener: Callable[[Path, str], None]) -> None:
        """``listener(directory, reason)`` is called once per directory, when it fails."""
        self._listeners.append(listener)

    def maybe_add_offline_log_dir(
        self, directory: Path, message: str, error: BaseException
    ) -> None:
        """Kafka's maybeAddOfflineLogDir: the first failure of ``directory`` is logged with
        its cause and reported; later ones change nothing."""
        directory = Path(directory)
        if directory in self._offline:
            return
        reason = f"{message}: {error}"
        self._offline[directory] = reason
        log.error("log dir %s is offline: %s", directory, reason)
        for listener in list(self._listeners):
            listener(directory, reason)

    def is_offline(self, directory: Path) -> bool:
        return bool(self._offline) and Path(directory) in self._offline

    @property
    def any_offline(self) -> bool:
        """Whether any directory has failed: the data path asks this first, per partition, so
        that the usual answer (none) costs no path arithmetic."""
        return bool(self._offline)

    def offline_reason(self, directory: Path) -> str | None:
        """Why ``directory`` failed, or None while it is online."""
        return self._offline.get(directory)

    @property
    def offline_dirs(self) -> dict[Path, str]:
        """Each failed directory and why it failed."""
        return dict(self._offline)
