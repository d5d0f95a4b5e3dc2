"""Authorization: Kafka's ACLs (``acls.py``, pure) and the node's authorizer built from its
configuration (``authorizer.class.name``, ``super.users``, ``allow.everyone.if.no.acl.found``).
"""

from minibroker.common.config import BrokerConfig
from minibroker.security.authorizer.acls import Authorizer


def authorizer_from_config(config: BrokerConfig) -> Authorizer | None:
    """The node's authorizer, or None when ``authorizer.class.name`` is empty (Kafka's
    default): then nothing is checked and the ACL APIs answer SECURITY_DISABLED."""
    if not config.authorizer_class_name:
        return None
    return Authorizer(config.super_users, config.allow_everyone_if_no_acl_found)
