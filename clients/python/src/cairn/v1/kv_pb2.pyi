from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SetMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SET_MODE_SET: _ClassVar[SetMode]
    SET_MODE_ADD: _ClassVar[SetMode]
    SET_MODE_REPLACE: _ClassVar[SetMode]
SET_MODE_SET: SetMode
SET_MODE_ADD: SetMode
SET_MODE_REPLACE: SetMode

class ResponseHeader(_message.Message):
    __slots__ = ("revision", "history_id")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_ID_FIELD_NUMBER: _ClassVar[int]
    revision: int
    history_id: int
    def __init__(self, revision: _Optional[int] = ..., history_id: _Optional[int] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ("key", "value", "flags", "expires_at", "cas", "mod_revision", "stale")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CAS_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    flags: int
    expires_at: int
    cas: int
    mod_revision: int
    stale: bool
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., flags: _Optional[int] = ..., expires_at: _Optional[int] = ..., cas: _Optional[int] = ..., mod_revision: _Optional[int] = ..., stale: _Optional[bool] = ...) -> None: ...

class Compare(_message.Message):
    __slots__ = ("cas", "mod_revision")
    CAS_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    cas: int
    mod_revision: int
    def __init__(self, cas: _Optional[int] = ..., mod_revision: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    def __init__(self, key: _Optional[bytes] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("header", "kv")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    kv: KeyValue
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., kv: _Optional[_Union[KeyValue, _Mapping]] = ...) -> None: ...

class Lookup(_message.Message):
    __slots__ = ("found", "kv")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    found: bool
    kv: KeyValue
    def __init__(self, found: _Optional[bool] = ..., kv: _Optional[_Union[KeyValue, _Mapping]] = ...) -> None: ...

class BatchGetRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class BatchGetResponse(_message.Message):
    __slots__ = ("header", "results")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    results: _containers.RepeatedCompositeFieldContainer[Lookup]
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., results: _Optional[_Iterable[_Union[Lookup, _Mapping]]] = ...) -> None: ...

class SetRequest(_message.Message):
    __slots__ = ("key", "value", "flags", "ttl_seconds", "expires_at", "mode", "compare")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    COMPARE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    flags: int
    ttl_seconds: int
    expires_at: int
    mode: SetMode
    compare: Compare
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., flags: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., expires_at: _Optional[int] = ..., mode: _Optional[_Union[SetMode, str]] = ..., compare: _Optional[_Union[Compare, _Mapping]] = ...) -> None: ...

class SetResponse(_message.Message):
    __slots__ = ("header", "cas", "mod_revision")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CAS_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    cas: int
    mod_revision: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., cas: _Optional[int] = ..., mod_revision: _Optional[int] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("key", "compare")
    KEY_FIELD_NUMBER: _ClassVar[int]
    COMPARE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    compare: Compare
    def __init__(self, key: _Optional[bytes] = ..., compare: _Optional[_Union[Compare, _Mapping]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("header", "revision")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    revision: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class TouchRequest(_message.Message):
    __slots__ = ("key", "ttl_seconds", "expires_at")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    ttl_seconds: int
    expires_at: int
    def __init__(self, key: _Optional[bytes] = ..., ttl_seconds: _Optional[int] = ..., expires_at: _Optional[int] = ...) -> None: ...

class TouchResponse(_message.Message):
    __slots__ = ("header", "mod_revision", "expires_at")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    mod_revision: int
    expires_at: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., mod_revision: _Optional[int] = ..., expires_at: _Optional[int] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("prefix", "limit", "page_token", "keys_only")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    KEYS_ONLY_FIELD_NUMBER: _ClassVar[int]
    prefix: bytes
    limit: int
    page_token: bytes
    keys_only: bool
    def __init__(self, prefix: _Optional[bytes] = ..., limit: _Optional[int] = ..., page_token: _Optional[bytes] = ..., keys_only: _Optional[bool] = ...) -> None: ...

class ScanResponse(_message.Message):
    __slots__ = ("header", "kvs", "next_page_token")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    KVS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    kvs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    next_page_token: bytes
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., kvs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., next_page_token: _Optional[bytes] = ...) -> None: ...

class StreamGetRequest(_message.Message):
    __slots__ = ("request_id", "keys")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, request_id: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class StreamGetResponse(_message.Message):
    __slots__ = ("request_id", "results", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    results: _containers.RepeatedCompositeFieldContainer[Lookup]
    error: str
    def __init__(self, request_id: _Optional[int] = ..., results: _Optional[_Iterable[_Union[Lookup, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...
