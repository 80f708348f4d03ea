"""The field-table engine: how every wire API's request fields are classified and keyed.

Each API family supplies a `Table` of its request fields (`chat/fields.py`, ...), and each
field's role, with its reason:

- *key*: it changes what the model sees (the prompt, tools, templates) or what it may emit
  (formats, grammars, banned or biased tokens), or what the server returns for the same
  generation, so it is part of the key: a request that differs in it never gets the
  saved answer;
- *strict*: it changes how the model samples or where it stops (temperature, max_tokens,
  stop, seed, ...). Not part of the key; `--strict` requires it to equal the saved value;
- *ignored*: transport and bookkeeping (`stream`, `user`, `metadata`, ...), or `model`
  and `n`, which select the saved run and the samples.

A field a table does not know is treated as *strict*: `--strict` compares it.

The key is 16 bytes of the SHA-256 of the canonical JSON (sorted keys, compact separators,
UTF-8 kept) of `{"v": KEY_VERSION, "kind": <the family>, <each key field the request sets,
in its normal form>}`. The engine's normal forms, for every family:
1. key order inside JSON objects, except inside a verbatim value (`verbatim`: a JSON
   Schema, a template's kwargs, a grammar): there key order is rendered into the prompt or
   followed by the grammar, so it is content, like everything else inside such a value;
2. `null`-valued fields where null means "unset" in the API (`api`): top-level fields and
   API objects, never inside a verbatim value (`{"const": null}` is not `{}`);
3. a field set to the value that means "unset" (`Field.unset`), before or after its normal
   form, and a field that means nothing without another (`Field.needs`: `tool_choice`
   when no field gives the model tools). `needs` lists *every* field that can give what
   the field acts on (Messages' `mcp_servers` give tools as `tools` does): a giver left
   out drops the field from a request it changes, which then gets an answer saved for
   another setting.
Each family adds the forms of its own objects (messages, tools, input items), and a family
whose API spells one field several ways or nests fields of different roles in one object
gives its table the request's one form (`Table(form=...)`: Gemini's camelCase for its
snake_case spellings, each field of its `generationConfig` a field of its own), which the
table reads every request through: its type check, its key and its sampling parameters.
Whitespace, case and anything else inside a text are never touched: exact means exact.

`KEY_VERSION` is the version of all of it, for every family at once; an index file built
with another is refused. Any change to how a key is computed that changes the bytes of a
key is a new version (tests pin some keys' bytes). Version 3: one version for every
family (Responses prompts carried a version 1 of their own), chat keys `echo` (vLLM puts
the last assistant message in front of the answer) and vLLM's other fields that change
the answer's text (`include_reasoning`, `truncation_side`, `media_io_kwargs`,
`logits_processors`), and a value that is its unset value once normalised is unset (a
`response_format` of `{"type": "text", "json_schema": null}`). Version 4: tool settings
(`tool_choice`, `parallel_tool_calls`) are keyed whenever any field gives the model tools
(Messages' `mcp_servers`, Responses' stored `prompt`), not only `tools`.

This module must never depend on the server, the index or the files: it is the contract,
tested directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import BadRequest
from .json_types import CLASSES, expected, type_name

KEY_VERSION = 4

KEY, STRICT, IGNORED = "key", "strict", "ignored"


class Unkeyable(ValueError):
    """A request or saved record whose key cannot be computed: `field` nests too deeply
    (orjson writes at most 255 levels)."""

    def __init__(self, field: str) -> None:
        super().__init__(f"`{field}` nests JSON objects or lists too deeply to be keyed "
                         "(at most about 250 levels)")
        self.field = field

    def bad_request(self) -> BadRequest:
        return BadRequest(str(self), param=self.field)


def api(value: Any) -> Any:
    """An API object's normal form: every null-valued field removed, at any depth (null
    means unset there). A flat object with no null (the usual message) is returned as it
    is, not copied: this is on the request path."""
    if isinstance(value, dict):
        for v in value.values():
            if v is None or isinstance(v, dict | list):
                return {k: api(v) for k, v in value.items() if v is not None}
        return value
    if isinstance(value, list):
        return [api(v) for v in value]
    return value


def verbatim(value: Any) -> dict[str, str]:
    """A value kept exactly, key order and nulls included (a JSON Schema, a template)."""
    return {"$verbatim": orjson.dumps(value).decode()}


def tool_list(schema: str) -> Callable[[Any], Any]:
    """The normal form of a list of tool definitions whose JSON Schema is the field
    `schema` (Responses' `parameters`, Messages' `input_schema`): nulls dropped from each
    tool, its schema kept verbatim."""

    def form(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        out = []
        for tool in value:
            if isinstance(tool, dict):
                tool = {k: v for k, v in tool.items() if v is not None}
                if schema in tool:
                    tool[schema] = verbatim(tool[schema])
            out.append(tool)
        return out

    return form


def unverbatim(value: Any) -> Any:
    """A normal form as a request sends it: verbatim values as they were."""
    if isinstance(value, dict):
        if value.keys() == {"$verbatim"} and isinstance(value["$verbatim"], str):
            return orjson.loads(value["$verbatim"])
        return {k: unverbatim(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unverbatim(v) for v in value]
    return value


def structured(value: Any) -> Any:
    """An object of verbatim values (vLLM's `structured_outputs`: a schema, a regex...)."""
    if not isinstance(value, dict):
        return value
    return {k: verbatim(v) for k, v in value.items() if v is not None}


def number(value: Any) -> Any:
    """Equal JSON numbers compare equal: an integral float is the integer (0.0 is 0)."""
    if type(value) is float and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if isinstance(value, list):
        return [number(v) for v in value]
    return value


@dataclass(frozen=True)
class Field:
    """One request field of a family: its role, the JSON types it accepts (checked, and
    documented in the OpenAPI schema), why it has that role, the values that mean the same
    as leaving it out, and the normal form of its value in the key."""

    name: str
    role: str
    types: tuple[str, ...]
    reason: str
    unset: tuple[Any, ...] = ()
    form: Callable[[Any], Any] = api
    needs: tuple[str, ...] = ()  # one of these keyed, or this one means nothing
    items: str | None = None  # the JSON type of an array's items, checked


def field(name: str, role: str, types: str, reason: str, *, unset: tuple[Any, ...] = (),
          form: Callable[[Any], Any] = api, needs: tuple[str, ...] = (),
          items: str | None = None) -> Field:
    """A Field, its types written `"string|array"`."""
    return Field(name, role, tuple(types.split("|")), reason, unset, form, needs, items)


class Table:
    """The request fields of one family, and what the engine does with them: the one type
    check of a request, its key fields in normal form, the sampling parameters `--strict`
    compares, the OpenAPI schema. `own` names the key fields the family keys itself (its
    prompt: `messages`, `prompt`, `input`); `aliases` the request field that a name of
    the keyed prompt stands for, where they differ; `form` the request in the one form
    the table's names read (None: the request as sent), applied by every method that
    reads a request."""

    def __init__(self, kind: str, fields: tuple[Field, ...], own: tuple[str, ...],
                 aliases: Mapping[str, str] | None = None,
                 form: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None) -> None:
        self.kind, self.fields, self.form = kind, fields, form
        self.aliases = dict(aliases or {})
        self.by_name = {f.name: f for f in fields}
        assert len(self.by_name) == len(fields), "a field is in the table twice"
        for f in fields:  # a rule that names no key field would drop its field always
            assert all(n in self.by_name and self.by_name[n].role == KEY for n in f.needs), \
                f"`{f.name}` needs {f.needs}: each must be a key field of the table"
        self._keyed = {f.name: f for f in fields if f.role == KEY and f.name not in own}
        self._not_strict = frozenset(f.name for f in fields if f.role != STRICT)
        self._strict_unset = {f.name: f.unset for f in fields if f.role == STRICT and f.unset}
        # orjson makes exact dicts, lists, strs, ints, floats and bools, never a subclass:
        # one set lookup a field (a bool is a bool, not an int). This is on every request.
        self._classes = {f.name: frozenset(c for t in ("null", *f.types) for c in CLASSES[t])
                         for f in fields}
        self._items = {f.name: CLASSES[f.items] for f in fields if f.items}

    def check(self, data: Mapping[str, Any]) -> None:
        """BadRequest naming the first field of a type the table does not accept."""
        if self.form is not None:
            data = self.form(data)
        classes = self._classes
        for name, value in data.items():
            accepted = classes.get(name)
            if accepted is not None and value.__class__ not in accepted:
                raise self._mistyped(name, value)
        for name, items in self._items.items():
            value = data.get(name)
            if value.__class__ is list and not all(v.__class__ in items for v in value):
                raise self._mistyped(name, value)

    def _mistyped(self, name: str, value: Any) -> BadRequest:
        f = self.by_name[name]
        return BadRequest(f"`{name}` must be {expected(f.types, f.items)}, got "
                          f"{type_name(value)}", param=name)

    def too_deep(self, error: Unkeyable) -> BadRequest:
        """The 400 for a request whose key cannot be made, naming the request's field."""
        return Unkeyable(self.aliases.get(error.field, error.field)).bad_request()

    def normal(self, name: str, value: Any) -> Any:
        """A key field's value in its normal form; Unkeyable naming it if it nests too deeply."""
        try:
            return self.by_name[name].form(value)
        except (RecursionError, orjson.JSONEncodeError):
            raise Unkeyable(name) from None

    def prompt(self, request: Mapping[str, Any], own: dict[str, Any]) -> dict[str, Any]:
        """The keyed prompt of a request: `own`, the family's own fields (already normal,
        in a dict of its own that becomes the prompt), and every other key field the
        request sets, normalised."""
        prompt = own
        prompt["v"], prompt["kind"] = KEY_VERSION, self.kind
        if self.form is not None:
            request = self.form(request)
        keyed = self._keyed
        names = request.keys() & keyed.keys()
        if not names:
            return prompt
        for name in names:
            value = request[name]
            unset = keyed[name].unset
            if value is None or value in unset:
                continue
            value = self.normal(name, value)
            if value not in unset:
                prompt[name] = value
        for name in names:
            needs = keyed[name].needs
            if needs and name in prompt and not any(n in prompt for n in needs):
                del prompt[name]
        return prompt

    def sampling_params(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """What `--strict` compares: every field the request sets (null, or a value that
        means unset, is not set) that is neither keyed nor ignored, numbers normalised.
        Fields the table does not know are compared too."""
        if self.form is not None:
            request = self.form(request)
        skip, unset = self._not_strict, self._strict_unset
        try:
            return {k: number(v) for k, v in request.items() if k not in skip and v is not None
                    and not (k in unset and v in unset[k])}
        except RecursionError:  # a list nested too deeply: which field is it?
            for name, value in request.items():
                try:
                    number(value)
                except RecursionError:
                    raise Unkeyable(name) from None
            raise

    def params(self, request: Mapping[str, Any]) -> bytes:
        """`sampling_params`, canonical: what a saved exchange is compared by."""
        return canonical(self.sampling_params(request))

    def schema(self, required: str, special: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON Schema of a request (the OpenAPI document), from the table: types and
        roles; `special` adds to a field's (an `anyOf` replaces its plain types).
        `additionalProperties` stays open: unknown fields are ignored."""
        properties: dict[str, Any] = {}
        for f in self.fields:
            types = list(f.types)
            spec: dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
            if f.items:
                spec["items"] = {"type": f.items}
            properties[f.name] = {**spec, "description": f"{f.role}: {f.reason}"}
        for name, extra in special.items():
            base = properties[name]
            if "anyOf" in extra:
                base = {"description": base["description"]}
            properties[name] = {**base, **extra}
        return {"type": "object", "required": [required], "properties": properties}


def canonical(prompt: Mapping[str, Any]) -> bytes:
    """Canonical JSON: sorted keys, compact separators, UTF-8 kept. Unkeyable, naming the
    field, for a value nested too deeply to encode (orjson's limit)."""
    try:
        return orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, RecursionError):
        raise Unkeyable(_too_deep(prompt)) from None


def _too_deep(prompt: Mapping[str, Any]) -> str:
    for name, value in prompt.items():
        try:
            orjson.dumps({name: value})
        except (orjson.JSONEncodeError, RecursionError):
            return str(name)
    return "the request"  # (never: one of the fields is the one)


KEY_BYTES = 16  # every key's length (`digest`)


def digest(canonical_json: bytes) -> bytes:
    """16 bytes of SHA-256 (hardware-accelerated on most CPUs, faster than BLAKE2b on a
    prompt-sized input there, and this is on every request)."""
    return hashlib.sha256(canonical_json).digest()[:KEY_BYTES]


def key_of(prompt: Mapping[str, Any]) -> bytes:
    """The key of a keyed prompt: `digest(canonical(prompt))`."""
    return digest(canonical(prompt))


def markdown_table(tables: Iterable[tuple[str, Table]]) -> str:
    """The docs' table of request fields of one family or more (`(name, table)`),
    generated from the tables (and tested): a field that several tables share (the same
    Field) is one row naming them all, and each table's own fields come right before the
    next shared one."""
    named = list(tables)
    order: list[Field] = []
    for _, table in named:
        pending: list[Field] = []  # fields of this table alone: before the next shared one
        for f in table.fields:
            if f in order:
                at = order.index(f)
                order[at:at] = pending
                pending = []
            else:
                pending.append(f)
        order += pending
    several = len(named) > 1
    head = "| field | endpoints | role | why |" if several else "| field | role | why |"
    rows = [head, "| --- | --- | --- | --- |" if several else "| --- | --- | --- |"]
    for f in order:
        where = " and ".join(n for n, t in named if f in t.fields)
        unset = f" (unset: `{orjson.dumps(f.unset[0]).decode()}`)" if f.unset else ""
        rows.append(f"| `{f.name}` |" + (f" {where} |" if several else "")
                    + f" {f.role} | {f.reason}{unset} |")
    return "\n".join(rows)
