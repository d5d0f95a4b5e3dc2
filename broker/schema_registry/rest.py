"""The schema registry's HTTP API: Confluent Schema Registry's REST API v1, as a Starlette
app served by Hypercorn on trio (the broker's own event loop) on the registry's listeners.

Each endpoint parses its request, asks the pure core (``state.Registry``) and answers what
Confluent answers: its JSON shapes, its status codes and its ``{"error_code", "message"}``
errors. Reads are served from this broker's copy of `_schemas` once it has applied what the
partition's high watermark shows; writes run on the writer, or are forwarded to it (see
``service``). A handler that fails unexpectedly answers 500 with error code 50001 and is
logged: the broker and its other clients carry on.

https listeners take their TLS context from the broker's ``ssl.*`` properties (the Kafka
listeners' code, ``security.listeners.server_ssl_context``, under the listener name
SCHEMA_REGISTRY). With ``schema.registry.authentication.method=BASIC`` the app is wrapped in
``BasicAuthentication`` (``auth``: the broker's SCRAM users), and each route checks what
``access`` says it needs of the Kafka ACLs when the broker has an authorizer.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from minibroker.common.config import BrokerConfig, HttpListener
from minibroker.common.names import SCHEMAS_TOPIC
from minibroker.schema_registry import access, auth
from minibroker.schema_registry.schemas import AVRO, PROTOBUF, SUPPORTED_TYPES
from minibroker.schema_registry.service import (
    WRITE_TIMEOUT_S,
    NotWriter,
    SchemaRegistryService,
)
from minibroker.schema_registry.state import (
    Registry,
    RegistryError,
    Version,
    context_of,
    extras_of,
    invalid_schema,
    parse_version,
    schema_not_found,
    subject_matches,
)

log = logging.getLogger("schema_registry")

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
# Set on a request forwarded to the writer (a writer that lost its role answers 50003
# rather than forwarding again), and on a write's answer: the `_schemas` offset the writer
# had applied, which the forwarding broker waits for before it answers.
FORWARDED_HEADER = "x-minibroker-forwarded"
OFFSET_HEADER = "x-minibroker-schemas-offset"
FORWARD_TIMEOUT_S = 30.0
# The registry's listener name for per-listener TLS settings: listener.name.schema_registry.ssl.*
# override the broker's ssl.* for the registry's https listeners.
REGISTRY_LISTENER = "SCHEMA_REGISTRY"
# Where the authenticated user's name rides in the ASGI scope.
USER_SCOPE_KEY = "minibroker.user"


class _Unreachable(Exception):
    """The writer did not answer a forwarded request (no writer known, connection failed)."""


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")), status, headers=headers, media_type=MEDIA_TYPE
    )


def _error(error: RegistryError) -> Response:
    return _json({"error_code": error.code, "message": error.message}, error.status)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise RegistryError(400, 400, f"Unrecognized JSON: {error}") from None
    if not isinstance(body, dict):
        raise RegistryError(400, 400, "The request body is not a JSON object")
    return body


def _schema_of(body: dict[str, Any]) -> tuple[str, str, list[dict[str, Any]]]:
    schema = body.get("schema")
    if not isinstance(schema, str) or not schema.strip():
        raise invalid_schema("Empty schema")
    schema_type = body.get("schemaType") or AVRO
    if not isinstance(schema_type, str):
        raise invalid_schema(f"Invalid schema type {schema_type!r}")
    references = body.get("references") or []
    if not isinstance(references, list):
        raise invalid_schema("Invalid schema references")
    return schema_type.upper(), schema, references


def _context(request: Request) -> str:
    """The context a schema id is looked up in: that of ``?subject=`` (Confluent's
    ``/schemas/ids/{id}?subject=:.name:``), the default context without it."""
    return context_of(request.query_params.get("subject"))


def _page(request: Request, items: list[Any]) -> list[Any]:
    """``?offset=`` and ``?limit=`` (a negative limit, the default -1, takes every item), as
    Confluent pages its lists and confluent-kafka's client sends them."""

    def number(name: str, default: int) -> int:
        try:
            return int(request.query_params.get(name, default))
        except ValueError:
            return default

    offset, limit = max(number("offset", 0), 0), number("limit", -1)
    return items[offset:] if limit < 0 else items[offset : offset + limit]


def qualified_path(path: str, query: str) -> tuple[str, str] | None:
    """Confluent's context URL form, ``/contexts/{context}/...``, as the qualified-subject form
    the routes serve (path and query string); None for a path not of that form.

    ``/contexts/.c/subjects/s/...`` is ``/subjects/:.c:s/...`` (and so for
    ``/compatibility/subjects/``, ``/config/`` and ``/mode/``), ``/contexts/.c/config`` and
    ``/mode`` the context's own (``/config/:.c:``), ``/contexts/.c/subjects`` the subjects
    listed with ``subjectPrefix=:.c:`` (``/contexts/./subjects`` with an empty one: the
    default context's), and ``/contexts/.c/schemas/...`` the schemas by id
    looked up with ``subject=:.c:``. The default context ``.`` means the unqualified paths."""
    if not path.startswith("/contexts/"):
        return None
    context, slash, rest = path.removeprefix("/contexts/").partition("/")
    if not context or not slash:
        return None
    rest = "/" + rest
    prefix = "" if context == "." else f":{context}:"
    params = parse_qsl(query, keep_blank_values=True)
    names = {name for name, _ in params}

    def with_param(name: str) -> str:
        if name in names or (not prefix and name != "subjectPrefix"):
            return query
        return urlencode([*params, (name, prefix)])

    for head in ("/subjects/", "/compatibility/subjects/", "/config/", "/mode/"):
        if rest.startswith(head):
            return head + prefix + rest.removeprefix(head), query
    if rest in ("/config", "/mode"):
        return (f"{rest}/{prefix}" if prefix else rest), query
    if rest == "/subjects":
        return rest, with_param("subjectPrefix")
    if rest.startswith("/schemas/"):
        return rest, with_param("subject")
    return None


class ContextPaths:
    """ASGI middleware: a request in the context URL form is routed as its qualified form
    (``qualified_path``), so that routes, ACL checks and metrics see the qualified subject.
    The raw path is kept: a forwarded write is sent as the client sent it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            query = scope.get("query_string", b"").decode("latin-1")
            found = qualified_path(scope["path"], query)
            if found is not None:
                path, query = found
                scope = {**scope, "path": path, "query_string": query.encode("latin-1")}
        await self.app(scope, receive, send)


def _schema_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise schema_not_found(text) from None


def _formatted(
    request: Request, current: Registry, found: Version, body: dict[str, Any]
) -> dict[str, Any]:
    """``?format=serialized``: a PROTOBUF schema as its base64 FileDescriptorProto, as
    confluent-kafka's Protobuf serializers ask for it (other formats: the stored text)."""
    if request.query_params.get("format") == "serialized" and found.schema_type == PROTOBUF:
        body["schema"] = current.serialized(found)
    return body


def build_app(service: SchemaRegistryService) -> Starlette:
    """The ASGI app of one broker's registry."""
    client = httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S, verify=forwarding_tls(service.config))

    async def forward(request: Request, url: str | None) -> Response:
        if FORWARDED_HEADER in request.headers:
            raise RegistryError(
                500, 50003, "Error while forwarding the request to the primary: not the primary"
            )
        if url is None:
            raise _Unreachable("no primary is known")
        # The path as sent (a subject's %2F stays encoded).
        raw = request.scope.get("raw_path")
        target = url + (raw.decode("latin-1") if raw else request.url.path)
        if request.url.query:
            target += "?" + request.url.query
        try:
            answer = await client.request(
                request.method,
                target,
                content=await request.body(),
                headers={
                    "content-type": request.headers.get("content-type", MEDIA_TYPE),
                    FORWARDED_HEADER: "1",
                    # The writer authenticates the client again (and authorizes it).
                    **(
                        {"authorization": request.headers["authorization"]}
                        if "authorization" in request.headers
                        else {}
                    ),
                },
            )
        except httpx.HTTPError as error:
            raise _Unreachable(str(error) or type(error).__name__) from None
        offset = answer.headers.get(OFFSET_HEADER)
        if offset is not None and offset.isdigit() and service.local_partition() is not None:
            await service.caught_up(int(offset))
        return Response(answer.content, answer.status_code, media_type=MEDIA_TYPE)

    async def write(request: Request, command: Callable[[Registry], tuple[Any, list]]) -> Response:
        """Run ``command`` here as the writer, or forward the request to the writer; when the
        writer cannot be reached (killed, say), wait for the controller to elect another
        (this broker, maybe) and try again, up to the write timeout."""
        deadline = trio.current_time() + WRITE_TIMEOUT_S
        while True:
            try:
                answer = await service.write(command)
            except NotWriter as moved:
                try:
                    return await forward(request, moved.url)
                except _Unreachable as unreachable:
                    log.info(
                        "the schema registry's writer %s did not answer (%s): waiting for another",
                        moved.url,
                        unreachable,
                    )
                    if not await service.writer_moved(moved.url, deadline):
                        raise RegistryError(
                            500,
                            50003,
                            f"Error while forwarding the request to the primary: {unreachable}",
                        ) from None
                    continue
            return _json(answer, headers={OFFSET_HEADER: str(service.position)})

    async def registry(request: Request) -> Registry | Response:
        """This broker's copy, caught up; or the writer's answer when this broker holds no
        replica of `_schemas`."""
        if (
            service.local_partition() is None
            and service.replicas.metadata.topic(SCHEMAS_TOPIC) is not None
        ):
            return await forward(request, service.writer_url())
        await service.caught_up()
        return service.registry

    def endpoint(handler):
        async def wrapped(request: Request) -> Response:
            try:
                return await handler(request)
            except RegistryError as error:
                return _error(error)
            except Exception:
                log.exception("%s %s failed", request.method, request.url.path)
                return _error(RegistryError(500, 50001, "Error in the backend data store"))

        return wrapped

    def read(handler: Callable[[Request, Registry], Any]):
        async def wrapped(request: Request) -> Response:
            current = await registry(request)
            if isinstance(current, Response):
                return current
            return _json(handler(request, current))

        return endpoint(wrapped)

    # -- subjects and versions -------------------------------------------------------------

    async def register(request: Request) -> Response:
        subject = request.path_params["subject"]
        body = await _body(request)
        schema_type, text, references = _schema_of(body)
        if len(text.encode()) > service.config.message_max_bytes:
            # Confluent's answer when its store refuses the record as too large (50001),
            # given before the schema is parsed, so a huge one costs the event loop nothing.
            raise RegistryError(
                500,
                50001,
                "Error while registering schema: the schema is larger than the"
                f" {service.config.message_max_bytes} bytes a record of {SCHEMAS_TOPIC} may"
                " hold (message.max.bytes)",
            )
        schema_id = body.get("id")
        version = body.get("version")
        extras = extras_of(body)

        def command(current: Registry):
            registered, records = current.register(
                subject,
                schema_type,
                text,
                references,
                schema_id if isinstance(schema_id, int) and schema_id > 0 else None,
                version if isinstance(version, int) and version > 0 else None,
                extras,
            )
            return {"id": registered}, records

        return await write(request, command)

    async def lookup(request: Request) -> Response:
        subject = request.path_params["subject"]
        body = await _body(request)
        schema_type, text, references = _schema_of(body)
        extras = extras_of(body)
        current = await registry(request)
        if isinstance(current, Response):
            return current
        deleted = _flag(request, "deleted")
        found = current.lookup(subject, schema_type, text, deleted, references, extras)
        return _json(_formatted(request, current, found, found.answer()))

    async def delete_subject(request: Request) -> Response:
        subject = request.path_params["subject"]
        permanent = _flag(request, "permanent")
        return await write(request, lambda current: current.delete_subject(subject, permanent))

    async def delete_version(request: Request) -> Response:
        subject = request.path_params["subject"]
        number = parse_version(request.path_params["version"])
        permanent = _flag(request, "permanent")
        return await write(
            request, lambda current: current.delete_version(subject, number, permanent)
        )

    def subjects(request: Request, current: Registry) -> Any:
        prefix = request.query_params.get("subjectPrefix")
        names = current.subject_names(_flag(request, "deleted"))
        return _page(
            request,
            [
                name
                for name in names
                if subject_matches(name, prefix)
                and allowed(
                    service,
                    request,
                    access.Operation.DESCRIBE,
                    access.ResourceType.TOPIC,
                    access.subject_resource(name),
                )
            ],
        )

    def versions(request: Request, current: Registry) -> Any:
        found = current.versions(request.path_params["subject"], _flag(request, "deleted"))
        return _page(request, [version.version for version in found])

    def version(request: Request, current: Registry) -> Any:
        number = parse_version(request.path_params["version"])
        found = current.version(request.path_params["subject"], number, _flag(request, "deleted"))
        return _formatted(request, current, found, found.answer())

    async def version_schema(request: Request) -> Response:
        current = await registry(request)
        if isinstance(current, Response):
            return current
        number = parse_version(request.path_params["version"])
        found = current.version(request.path_params["subject"], number, _flag(request, "deleted"))
        return Response(found.schema, media_type=MEDIA_TYPE)

    def referenced_by(request: Request, current: Registry) -> Any:
        return current.referenced_by(
            request.path_params["subject"], parse_version(request.path_params["version"])
        )

    # -- schemas by id -----------------------------------------------------------------------

    def schema_by_id(request: Request, current: Registry) -> Any:
        found = current.by_id(_schema_id(request.path_params["id"]), _context(request))
        body: dict[str, Any] = {"schema": found.schema}
        if found.schema_type != AVRO:
            body["schemaType"] = found.schema_type
        if found.references:
            body["references"] = found.references
        body.update(found.extras)
        return _formatted(request, current, found, body)

    async def raw_schema_by_id(request: Request) -> Response:
        current = await registry(request)
        if isinstance(current, Response):
            return current
        found = current.by_id(_schema_id(request.path_params["id"]), _context(request))
        return Response(found.schema, media_type=MEDIA_TYPE)

    def id_versions(request: Request, current: Registry) -> Any:
        schema_id = _schema_id(request.path_params["id"])
        deleted = _flag(request, "deleted")
        return _page(request, current.subject_versions_of(schema_id, deleted, _context(request)))

    def id_subjects(request: Request, current: Registry) -> Any:
        schema_id = _schema_id(request.path_params["id"])
        found = current.subject_versions_of(schema_id, _flag(request, "deleted"), _context(request))
        return _page(request, sorted({entry["subject"] for entry in found}))

    def types(request: Request, current: Registry) -> Any:
        return list(SUPPORTED_TYPES)

    def contexts(request: Request, current: Registry) -> Any:
        return _page(request, current.contexts())

    # -- config and mode ---------------------------------------------------------------------

    def subject_of(request: Request) -> str | None:
        return request.path_params.get("subject")

    def get_config(request: Request, current: Registry) -> Any:
        subject = subject_of(request)
        if (
            subject is not None
            and subject not in current.levels
            and not _flag(request, "defaultToGlobal")
        ):
            raise RegistryError(
                404,
                40408,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        return {"compatibilityLevel": current.level(subject).value}

    async def put_config(request: Request) -> Response:
        subject = subject_of(request)
        level = (await _body(request)).get("compatibility")

        def command(current: Registry):
            chosen, records = current.set_level(subject, level)
            return {"compatibility": chosen.value}, records

        return await write(request, command)

    async def delete_config(request: Request) -> Response:
        subject = subject_of(request)

        def command(current: Registry):
            level, records = current.delete_level(subject)
            return {"compatibilityLevel": level.value}, records

        return await write(request, command)

    def get_mode(request: Request, current: Registry) -> Any:
        subject = subject_of(request)
        if (
            subject is not None
            and subject not in current.modes
            and not _flag(request, "defaultToGlobal")
        ):
            raise RegistryError(
                404, 40409, f"Subject '{subject}' does not have subject-level mode configured"
            )
        return {"mode": current.mode(subject)}

    async def put_mode(request: Request) -> Response:
        subject = subject_of(request)
        mode = (await _body(request)).get("mode")
        force = _flag(request, "force")

        def command(current: Registry):
            chosen, records = current.set_mode(subject, mode, force)
            return {"mode": chosen}, records

        return await write(request, command)

    async def check(request: Request) -> Response:
        subject = request.path_params["subject"]
        text = request.path_params.get("version", "latest")
        number = parse_version(text)
        schema_type, schema, references = _schema_of(await _body(request))
        current = await registry(request)
        if isinstance(current, Response):
            return current
        verbose = _flag(request, "verbose")
        return _json(current.check(subject, number, schema_type, schema, verbose, references))

    def root(request: Request, current: Registry) -> Any:
        return {}

    routes = [
        Route("/", read(root), methods=["GET"]),
        Route("/subjects", read(subjects), methods=["GET"]),
        # Subjects may hold a "/" (sent as %2F, which the ASGI path has decoded, e.g. the
        # file names confluent-kafka's Protobuf serializer uses as reference subjects): the
        # subject matches greedily, so the longer routes come first.
        Route(
            "/subjects/{subject:path}/versions/{version}/schema",
            endpoint(version_schema),
            methods=["GET"],
        ),
        Route(
            "/subjects/{subject:path}/versions/{version}/referencedby",
            read(referenced_by),
            methods=["GET"],
        ),
        Route("/subjects/{subject:path}/versions/{version}", read(version), methods=["GET"]),
        Route(
            "/subjects/{subject:path}/versions/{version}",
            endpoint(delete_version),
            methods=["DELETE"],
        ),
        Route("/subjects/{subject:path}/versions", read(versions), methods=["GET"]),
        Route("/subjects/{subject:path}/versions", endpoint(register), methods=["POST"]),
        Route("/subjects/{subject:path}", endpoint(lookup), methods=["POST"]),
        Route("/subjects/{subject:path}", endpoint(delete_subject), methods=["DELETE"]),
        Route("/schemas/types", read(types), methods=["GET"]),
        Route("/contexts", read(contexts), methods=["GET"]),
        Route("/schemas/ids/{id}", read(schema_by_id), methods=["GET"]),
        Route("/schemas/ids/{id}/schema", endpoint(raw_schema_by_id), methods=["GET"]),
        Route("/schemas/ids/{id}/versions", read(id_versions), methods=["GET"]),
        Route("/schemas/ids/{id}/subjects", read(id_subjects), methods=["GET"]),
        Route("/config", read(get_config), methods=["GET"]),
        Route("/config", endpoint(put_config), methods=["PUT"]),
        Route("/config", endpoint(delete_config), methods=["DELETE"]),
        Route("/config/{subject:path}", read(get_config), methods=["GET"]),
        Route("/config/{subject:path}", endpoint(put_config), methods=["PUT"]),
        Route("/config/{subject:path}", endpoint(delete_config), methods=["DELETE"]),
        Route("/mode", read(get_mode), methods=["GET"]),
        Route("/mode", endpoint(put_mode), methods=["PUT"]),
        Route("/mode/{subject:path}", read(get_mode), methods=["GET"]),
        Route("/mode/{subject:path}", endpoint(put_mode), methods=["PUT"]),
        Route(
            "/compatibility/subjects/{subject:path}/versions/{version}",
            endpoint(check),
            methods=["POST"],
        ),
        Route("/compatibility/subjects/{subject:path}/versions", endpoint(check), methods=["POST"]),
    ]

    async def http_error(request: Request, error: Exception) -> Response:
        status = error.status_code if isinstance(error, HTTPException) else 500
        message = error.detail if isinstance(error, HTTPException) else "Internal Server Error"
        return _json({"error_code": status, "message": f"HTTP {status} {message}"}, status)

    return Starlette(
        routes=[_counted(route, service) for route in routes],
        exception_handlers={HTTPException: http_error},
        middleware=[Middleware(ContextPaths)],
    )


def _counted(route: Route, service: SchemaRegistryService) -> Route:
    """The route, its requests authorized (``access``) and its answers counted by method,
    path template and status (metrics)."""
    handler = route.endpoint
    (method,) = route.methods - {"HEAD"} if route.methods else {"GET"}
    label = f"{method} {route.path}"
    access.needs(method, route.path, None)  # Unclassified: a route no one decided on

    by_id = access.needs(method, route.path, None).by_id

    async def counted(request: Request) -> Response:
        response: Response | None = None
        if by_id:
            try:
                await _id_caught_up(service, request)
            except RegistryError as error:
                response = _error(error)
        if response is None:
            refusal = _refusal(service, request, method, route.path)
            response = refusal or await handler(request)
        service.requests[(label, response.status_code)] += 1
        return response

    return Route(route.path, counted, methods=[method])


async def _id_caught_up(service: SchemaRegistryService, request: Request) -> None:
    """Before a route of a schema id (``GET /schemas/ids/{id}...``) is authorized and
    answered: when this broker's copy does not hold the id, wait until the copy has applied
    `_schemas` up to its end as its leader knows it (``caught_up_to_end``, the rule of schema
    validation on produce and of the Iceberg writer), so that a broker just restarted, or a
    follower that has not fetched yet, does not answer 40403 for an id registered before the
    request. RegistryError 50002 or 50001 (Confluent's store errors) when that end cannot be
    known. A known id asks nothing (the common case stays a dict lookup). Done before the
    ACL check, which looks for the subjects holding the id in the same copy.

    Confluent's reads wait for its reader to reach the topic's last offset
    (KafkaStore.waitUntilKafkaReaderReachesLastOffset) before they are served; here only an
    id this copy does not hold waits. A broker without a replica of `_schemas` forwards the
    request to the writer instead (``registry`` in build_app)."""
    if service.local_partition() is None:
        return
    try:
        schema_id = _schema_id(request.path_params["id"])
    except RegistryError:
        return  # the route answers it
    context = _context(request)
    await service.caught_up()
    try:
        service.registry.subject_versions_of(schema_id, True, context)
        return
    except RegistryError:
        pass
    await service.caught_up_to_end()


def allowed(
    service: SchemaRegistryService,
    request: Request,
    operation: access.Operation,
    resource_type: int,
    name: str,
) -> bool:
    """Whether the request's user may do ``operation`` on the resource; True when the
    registry does not authorize (no basic authentication, or a broker without authorizer)."""
    user = request.scope.get(USER_SCOPE_KEY)
    if service.authorizer is None or user is None:
        return True
    client = request.scope.get("client")
    host = client[0] if client else "*"
    return service.authorizer.authorize(f"User:{user}", host, operation, resource_type, name)


def _refusal(
    service: SchemaRegistryService, request: Request, method: str, template: str
) -> Response | None:
    """403 with Confluent's 40301 when the ACLs refuse the request; None to serve it."""
    need = access.needs(method, template, request.path_params.get("subject"))
    if need.operation is None or need.listing:
        return None
    if need.by_id:
        try:
            holders = service.registry.subject_versions_of(
                _schema_id(request.path_params["id"]), True, _context(request)
            )
        except RegistryError:
            return None  # unknown: the route answers 40403
        if any(
            allowed(
                service,
                request,
                need.operation,
                access.ResourceType.TOPIC,
                access.subject_resource(holder["subject"]),
            )
            for holder in holders
        ):
            return None
    elif allowed(service, request, need.operation, need.resource_type, need.name):
        return None
    return _error(RegistryError(*access.denied(need.operation, need)))


def forwarding_tls(config: BrokerConfig) -> ssl.SSLContext | bool:
    """How this broker checks another's https registry listener when it forwards a write:
    the registry's trust store (``listener.name.schema_registry.ssl.truststore.*``, else the
    broker's ``ssl.truststore.*``), else the system's authorities."""
    if not any(listener.tls for listener in config.schema_registry_listeners):
        return True
    from minibroker.security.listeners import client_ssl_context

    return client_ssl_context(config, REGISTRY_LISTENER)


class _RegistryHypercornConfig(HypercornConfig):
    """Hypercorn's configuration, with the TLS context built from the broker's ``ssl.*``
    properties (the same code as its Kafka listeners') rather than Hypercorn's own."""

    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        super().__init__()
        self._ssl_context = ssl_context

    @property
    def ssl_enabled(self) -> bool:
        return self._ssl_context is not None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self._ssl_context


def _bind(listener: HttpListener) -> str:
    host, port = listener.host, listener.port
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def registry_config(config: BrokerConfig) -> HypercornConfig:
    """Hypercorn's configuration for the registry's listeners; ConfigError (from the TLS
    settings) names a bad or missing ``ssl.*`` property when a listener is https."""
    listeners = config.schema_registry_listeners
    context = None
    if any(listener.tls for listener in listeners):
        from minibroker.security.listeners import server_ssl_context

        context = server_ssl_context(config, REGISTRY_LISTENER, "SSL")
        context.set_alpn_protocols(["http/1.1"])
    hypercorn = _RegistryHypercornConfig(context)
    hypercorn.bind = [_bind(listener) for listener in listeners if listener.tls]
    hypercorn.insecure_bind = [_bind(listener) for listener in listeners if not listener.tls]
    if context is None:
        hypercorn.bind, hypercorn.insecure_bind = hypercorn.insecure_bind, []
    hypercorn.accesslog = None
    hypercorn.errorlog = log
    hypercorn.graceful_timeout = 1.0
    return hypercorn


def bind_registry(config: BrokerConfig) -> Sockets:
    """The registry's listening sockets, bound when the broker starts (as its Kafka
    listeners are): a port in use stops the start with the address named."""
    hypercorn = registry_config(config)
    try:
        sockets = hypercorn.create_sockets()
    except OSError as error:
        listeners = ",".join(
            f"{listener.scheme}://{_bind(listener)}"
            for listener in config.schema_registry_listeners
        )
        raise OSError(
            error.errno,
            f"cannot listen on schema.registry.listeners {listeners}: {error.strerror or error}",
        ) from None
    for sock in [*sockets.secure_sockets, *sockets.insecure_sockets]:
        sock.listen(hypercorn.backlog)
    return sockets


class BasicAuthentication:
    """An ASGI wrapper that lets through the requests whose ``Authorization: Basic`` names a
    SCRAM user of the broker with its password (``auth``), and answers the others 401 with
    Confluent's error code 40101, before any route runs. The user's name goes on in the
    scope (USER_SCOPE_KEY)."""

    def __init__(self, app: Any, authenticator: auth.BasicAuthenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next(
            (
                value.decode("latin-1")
                for name, value in scope["headers"]
                if name == b"authorization"
            ),
            None,
        )
        given = auth.credentials(header)
        if given is not None and await self._passes(*given):
            scope[USER_SCOPE_KEY] = given[0]
            await self.app(scope, receive, send)
            return
        answer = _json(
            {"error_code": 40101, "message": "Unauthorized"},
            401,
            headers={"www-authenticate": 'Basic realm="minibroker-schema-registry"'},
        )
        await answer(scope, receive, send)

    async def _passes(self, user: str, password: str) -> bool:
        known = self.authenticator.remembered(user, password)
        if known is not None:
            return known
        credential = await trio.to_thread.run_sync(self.authenticator.check, user, password)
        if credential is None:
            return False
        self.authenticator.remember(user, password, credential)
        return True


async def serve_registry(
    service: SchemaRegistryService,
    sockets: Sockets,
    *,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the registry's app on ``sockets`` (from bind_registry) until cancelled;
    Hypercorn stops on cancellation and installs no signal handlers of its own here."""
    hypercorn = registry_config(service.config)
    app: Any = build_app(service)
    if service.authenticator is not None:
        app = BasicAuthentication(app, service.authenticator)
    await worker_serve(
        wrap_app(app, hypercorn.wsgi_max_body_size, "asgi"),
        hypercorn,
        sockets=sockets,
        shutdown_trigger=trio.sleep_forever,
        task_status=task_status,
    )
