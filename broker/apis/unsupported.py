"""What a client asks for that minibroker does not serve yet, said once per client.

A feature that is not built (transactions, the KIP-848 consumer protocol, share groups,
client quotas) is answered the way Kafka answers when it cannot serve it, and the broker log
says so once per client (client id and address) at INFO, with the reason: the client's error
alone is often only in its debug log.
"""

import logging

from minibroker.apis import RequestContext

log = logging.getLogger("unsupported")

# (what, client id, host) already said; bounded so that many clients cannot grow it for ever.
_SAID: set[tuple[str, str, str]] = set()
_MAX_REMEMBERED = 10_000


def say_once(ctx: RequestContext, what: str, reason: str) -> None:
    """Log ``reason`` at INFO the first time this client asks for ``what``."""
    key = (what, ctx.header.client_id or "", ctx.connection.host)
    if key in _SAID:
        return
    if len(_SAID) >= _MAX_REMEMBERED:
        _SAID.clear()
    _SAID.add(key)
    log.info(
        "client %r from %s asked for %s: %s",
        ctx.header.client_id,
        ctx.connection.host or "?",
        what,
        reason,
    )
