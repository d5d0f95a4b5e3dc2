"""The SCRAM credentials a node checks logins against (Kafka's CredentialCache)."""

from minibroker.protocol import sasl


class ScramCredentials:
    """Every SCRAM credential this node can check, by mechanism and user: those the
    controller stores (AlterUserScramCredentials), which win, and those bootstrapped from
    configuration (security/listeners.py's bootstrap_scram_users)."""

    def __init__(self) -> None:
        self._configured: dict[tuple[str, str], sasl.ScramCredential] = {}
        self._stored: dict[tuple[str, str], sasl.ScramCredential] = {}

    def get(self, mechanism: str, user: str) -> sasl.ScramCredential | None:
        key = (mechanism, user)
        return self._stored.get(key) or self._configured.get(key)

    def configure(self, mechanism: str, user: str, credential: sasl.ScramCredential) -> None:
        self._configured[(mechanism, user)] = credential

    def store(self, mechanism: str, user: str, credential: sasl.ScramCredential) -> None:
        self._stored[(mechanism, user)] = credential

    def forget(self, mechanism: str, user: str) -> None:
        self._stored.pop((mechanism, user), None)

    def forget_stored(self) -> None:
        self._stored.clear()
