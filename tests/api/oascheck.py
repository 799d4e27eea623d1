"""oascheck.py - holds HTTP answers to api/openapi.yaml (OpenAPI 3.1).

Spec.check() looks up the operation and status of an answer in the document
and returns every way the answer departs from it: a status, content type or
header the document does not list, a body that fails the documented schema
(every object schema closed in this view, so an undocumented field fails),
a missing required header, a body where none is documented, an Allow header
that does not name exactly the path's documented methods. Each answer that
passes is counted in a coverage table of every documented (path, method,
status), plus the answers outside any operation (x-other-responses).

check_document() (oascheck_doc.py) validates the document itself: the official OpenAPI 3.1
meta-schema, every Schema Object against JSON Schema 2020-12 and the OAS
base vocabulary, keywords spelled as JSON Schema knows them, every $ref,
operation and path parameter.

JSON, in answers and in requests, is read as the document says the service
reads it (strict_json): RFC 8259 whole, a key twice refused, and a number
written with a fraction or an exponent is no integer, so that a fence printed
as 1.79561494424068e+15 fails `type: integer` (JSON Schema alone counts 1e3
and 1000.0 as integers).

Validator: python3-jsonschema (Debian), Draft 2020-12, which is the dialect
of OpenAPI 3.1 Schema Objects.
"""
import copy
import decimal
import json
import re
import urllib.parse

import jsonschema

HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
# Headers every answer may carry without the document naming them.
STANDARD_HEADERS = {"date", "content-length", "content-type", "connection", "transfer-encoding",
                    "keep-alive"}
OTHER_CATEGORIES = ["anyRequest", "unknownPath", "otherMethod"]
# Body fields whose documented values (enum, const) each answer must reach
# too: the error codes of every status, and the reasons of not_held.
CODE_FIELDS = ["error", "errorCode", "reason"]
# The schemas of streams' lines whose every event (and reason) must be reached.
STREAM_SCHEMAS = ["HoldEvent", "ElectionEvent", "ElectionWatchEvent"]

# JSON Schema 2020-12 keywords, and those OpenAPI 3.1 adds to Schema Objects.
SCHEMA_KEYWORDS = {
    "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
    "$comment", "$defs", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "dependentSchemas", "prefixItems", "items", "contains", "properties", "patternProperties",
    "additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
    "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties", "required",
    "dependentRequired", "title", "description", "default", "deprecated", "readOnly",
    "writeOnly", "examples", "format", "contentEncoding", "contentMediaType", "contentSchema",
    # OpenAPI 3.1 base vocabulary
    "discriminator", "xml", "externalDocs", "example",
}
SUBSCHEMA_MAPS = ["properties", "patternProperties", "$defs", "dependentSchemas"]
SUBSCHEMA_ONE = ["items", "contains", "not", "if", "then", "else", "additionalProperties",
                 "unevaluatedProperties", "unevaluatedItems", "propertyNames", "contentSchema"]
SUBSCHEMA_LIST = ["allOf", "anyOf", "oneOf", "prefixItems"]


def subschemas(s):
    """Direct subschemas of a schema, with their keyword paths."""
    if not isinstance(s, dict):
        return
    for k in SUBSCHEMA_MAPS:
        if isinstance(s.get(k), dict):
            for name, sub in s[k].items():
                yield f"{k}/{name}", sub
    for k in SUBSCHEMA_ONE:
        if k in s:
            yield k, s[k]
    for k in SUBSCHEMA_LIST:
        if isinstance(s.get(k), list):
            for i, sub in enumerate(s[k]):
                yield f"{k}/{i}", sub


def pointer_get(doc, ref):
    """Follows a local $ref ('#/a/b'). KeyError when it does not resolve."""
    if not ref.startswith("#"):
        raise KeyError(f"not a local reference: {ref}")
    node = doc
    for part in ref[1:].split("/")[1:]:
        part = urllib.parse.unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node[part]
    return node


def strict_json(data):
    """bytes or str -> the value, read as the document's info says the service
    reads a body: UTF-8 (no lone surrogate either), no raw control byte in a
    string (json's strict mode), no escaped NUL, no key twice in one object,
    nothing after the value, no NaN or Infinity, no number beyond a 64-bit
    integer or a double. A number with a fraction or an exponent becomes a
    Decimal, which JSON Schema's `integer` refuses. ValueError otherwise."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data

    def pairs(ps):
        seen = set()
        for k, _ in ps:
            if k in seen:
                raise ValueError(f"the key {k!r} appears twice")
            seen.add(k)
        return dict(ps)

    def integer(t):
        v = int(t)
        if not -2 ** 63 <= v < 2 ** 63:
            raise ValueError(f"{t} is beyond a 64-bit integer")
        return v

    def real(t):
        v = decimal.Decimal(t)
        if abs(v) > decimal.Decimal("1.7976931348623157e308"):
            raise ValueError(f"{t} is beyond a double")
        return v

    def constant(t):
        raise ValueError(f"{t} is not JSON")
    value = json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=real,
                       parse_constant=constant)

    def strings(v):
        if isinstance(v, str):
            v.encode("utf-8")   # UnicodeEncodeError (a ValueError) on a lone surrogate
            if "\x00" in v:
                raise ValueError("a string holds NUL (\\u0000)")
        elif isinstance(v, dict):
            for k, x in v.items():
                strings(k)
                strings(x)
        elif isinstance(v, list):
            for x in v:
                strings(x)
    strings(value)
    return value


def norm_media(v):
    """'Text/Plain ; version=0.0.4' -> 'text/plain; version=0.0.4'"""
    parts = [p.strip() for p in v.split(";")]
    return "; ".join([parts[0].lower()] + [p for p in parts[1:] if p])


class Spec:
    def __init__(self, doc):
        self.doc = doc
        self.closed = copy.deepcopy(doc)
        for s in self._schema_positions(self.closed):
            self._close(s)
        self.templates = []   # (template, regex, path item)
        for tpl, item in doc.get("paths", {}).items():
            # A path parameter is one or more bytes; the last one takes the
            # rest of the path, '/' included, as the service routes it
            # (/locks/a/b is the lock route with a bad name, not a 404).
            parts = re.split(r"(\{[^}]+\})", tpl)
            rx = ""
            for i, p in enumerate(parts):
                if p.startswith("{"):
                    last = all(not q.startswith("{") and not q for q in parts[i + 1:])
                    rx += f"(?P<{p[1:-1]}>.+)" if last else f"(?P<{p[1:-1]}>[^/]+)"
                else:
                    rx += re.escape(p)
            self.templates.append((tpl, re.compile("^" + rx + "$"), item))
        # The most literal template first, as the service routes:
        # /elections/x/value is the value route, not an election named "x/value".
        self.templates.sort(key=lambda t: -len(re.sub(r"\{[^}]+\}", "", t[0])))
        self.reached = {}     # coverage key -> count
        self.codes = {}       # (coverage key, field, value) -> count
        self.events = {}      # held-stream event variant -> count

    # ---- the document as data ----

    def resolve(self, obj, doc=None):
        doc = doc or self.doc
        seen = 0
        while isinstance(obj, dict) and "$ref" in obj and seen < 20:
            obj = pointer_get(doc, obj["$ref"])
            seen += 1
        return obj

    @staticmethod
    def _schema_positions(doc):
        """Every top-level Schema Object of the document (components, parameters,
        headers, media types), wherever it sits."""
        out = []

        def walk(node, path):
            if isinstance(node, dict):
                for k, v in node.items():
                    if k == "schema" and isinstance(v, dict) and path and path[-1] != "properties":
                        out.append(v)
                    elif k == "schemas" and path == ["components"]:
                        out.extend(v.values())
                    else:
                        walk(v, path + [k])
            elif isinstance(node, list):
                for v in node:
                    walk(v, path)
        walk(doc, [])
        return out

    def _close(self, s):
        """In this view every object schema admits only the properties it
        (or what it applies in place: allOf, $ref) names."""
        if not isinstance(s, dict):
            return
        t = s.get("type")
        is_object = t == "object" or (isinstance(t, list) and "object" in t)
        if is_object and "additionalProperties" not in s and "unevaluatedProperties" not in s:
            s["unevaluatedProperties"] = False
        for _, sub in subschemas(s):
            self._close(sub)

    def operations(self):
        for tpl, item in self.doc.get("paths", {}).items():
            for m in HTTP_METHODS:
                if m in item:
                    yield tpl, m, item[m]

    def coverage_keys(self):
        keys = []
        for tpl, m, op in self.operations():
            for st in op.get("responses", {}):
                keys.append(("op", tpl, m.upper(), st))
        other = self.doc.get("x-other-responses", {})
        for cat in OTHER_CATEGORIES:
            for st in other.get(cat, {}) or {}:
                keys.append(("other", cat, "*", st))
        return keys

    def response_of(self, key):
        if key[0] == "op":
            return self.resolve(self.doc["paths"][key[1]][key[2].lower()]["responses"][key[3]])
        return self.resolve(self.doc["x-other-responses"][key[1]][key[3]])

    def documented_codes(self, key):
        """{field: set of values} of the CODE_FIELDS of a JSON answer. None
        for HEAD: its answer has no body, and its GET reaches the codes."""
        if key[0] == "op" and key[2] == "HEAD":
            return {}
        out = {}
        for media, mt in (self.response_of(key).get("content") or {}).items():
            if norm_media(media) == "application/json":
                out = self._schema_codes(mt.get("schema", {}))
        return out

    def _schema_codes(self, schema):
        """The codes one schema admits: what it and its allOf parts all say
        (intersected), and each alternative of a oneOf or anyOf (united)."""
        schema = self.resolve(schema)
        out = {}
        parts = [schema] + [self.resolve(x) for x in schema.get("allOf", [])]
        for part in parts:
            for f, ps in (part.get("properties") or {}).items():
                ps = self.resolve(ps)
                vals = set(ps["enum"]) if "enum" in ps else {ps["const"]} if "const" in ps else None
                if f in CODE_FIELDS and vals is not None:
                    out[f] = out[f] & vals if f in out else vals
        for alt in schema.get("oneOf", []) + schema.get("anyOf", []):
            for f, vals in self._schema_codes(alt).items():
                out[f] = out.get(f, set()) | vals
        return out

    def code_keys(self):
        return [(k, f, v) for k in self.coverage_keys()
                for f, vals in sorted(self.documented_codes(k).items()) for v in sorted(vals)]

    def event_keys(self):
        """Every variant of a stream's event (held streams, campaigns,
        watches): (event, reason) pairs, reason None where the variant may
        omit it."""
        keys = []
        for stream in STREAM_SCHEMAS:
            ev = self.resolve(self.doc["components"]["schemas"].get(stream, {"oneOf": []}))
            for alt in ev.get("oneOf", [ev] if "properties" in ev else []):
                alt = self.resolve(alt)
                event = alt["properties"]["event"]
                names = [event["const"]] if "const" in event else event["enum"]
                reason = self.resolve(alt["properties"].get("reason", {}))
                for name in names:
                    if "reason" in alt.get("required", []):
                        keys += [(name, r) for r in reason["enum"]]
                    elif reason:
                        keys += [(name, None)] + [(name, r) for r in reason["enum"]]
                    else:
                        keys.append((name, None))
        return list(dict.fromkeys(keys))

    def match(self, raw_path):
        path = raw_path.split("?", 1)[0]
        for tpl, rx, item in self.templates:
            m = rx.match(path)
            if m:
                return tpl, item, m.groupdict()
        return None, None, {}

    def validator(self, schema, closed=True):
        return jsonschema.Draft202012Validator(
            schema, resolver=jsonschema.RefResolver("", self.closed if closed else self.doc))

    def schema_errors(self, schema, value, closed=True):
        return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
                for e in self.validator(schema, closed).iter_errors(value)]

    # ---- answers ----

    def lookup(self, method, raw_path, status):
        """-> (coverage key, response object, path template, problem)"""
        st = str(status)
        tpl, item, _ = self.match(raw_path)
        other = self.doc.get("x-other-responses", {})
        if tpl is None:
            cats = ["unknownPath", "anyRequest"]
        elif method.lower() in item:
            op = item[method.lower()]
            if st in op["responses"]:
                return ("op", tpl, method.upper(), st), op["responses"][st], tpl, None
            cats = ["anyRequest"]
        else:
            cats = ["otherMethod", "anyRequest"]
        for c in cats:
            if st in (other.get(c) or {}):
                return ("other", c, "*", st), other[c][st], tpl, None
        where = f"{method} {tpl}" if tpl else f"{method} {raw_path} (no documented path; {cats[0]})"
        return None, None, tpl, f"status {st} is not documented for {where}"

    def check(self, method, raw_path, status, headers, body, stream_complete=True):
        """headers: list of (name, value). body: bytes. For a held stream
        still open, stream_complete=False: only whole lines are checked.
        Returns the problems found (empty when the answer conforms) and
        counts the answer for coverage when it conforms."""
        key, resp, tpl, problem = self.lookup(method, raw_path, status)
        if problem:
            return [problem]
        probs = []
        resp = self.resolve(resp)
        hdrs = {}
        for k, v in headers:
            hdrs.setdefault(k.lower(), []).append(v)
        # Headers: documented ones valid (and present when required), no others.
        documented = {}
        for name, h in (resp.get("headers") or {}).items():
            documented[name.lower()] = self.resolve(h)
        for name, h in documented.items():
            vals = hdrs.get(name)
            if not vals:
                if h.get("required"):
                    probs.append(f"required header {name} missing")
                continue
            if len(vals) > 1:
                probs.append(f"header {name} sent {len(vals)} times")
            v = vals[0]
            schema = self.resolve(h.get("schema", {}))
            if schema.get("type") == "integer":
                if not re.fullmatch(r"[0-9]+", v):
                    probs.append(f"header {name}: {v!r} is not an integer")
                    continue
                v = int(v)
            for e in self.schema_errors(h.get("schema", {}), v):
                probs.append(f"header {name}: {e}")
        for name in hdrs:
            if name not in documented and name not in STANDARD_HEADERS:
                probs.append(f"header {name} is not documented for this answer")
        if key and key[0] == "other" and key[1] == "otherMethod" and hdrs.get("allow"):
            _, item, _ = self.match(raw_path)
            want = sorted(m.upper() for m in HTTP_METHODS if m in item)
            got = sorted(x.strip() for x in hdrs["allow"][0].split(","))
            if got != want:
                probs.append(f"Allow lists {got}, the document {want}")
        # Content.
        content = resp.get("content") or {}
        ctype = hdrs.get("content-type", [None])[0]
        is_head = method.upper() == "HEAD"
        if not content:
            if body:
                probs.append(f"a body of {len(body)} bytes where the document has none")
            if ctype:
                probs.append(f"Content-Type {ctype} where the document has no content")
        else:
            media = None
            if ctype is None:
                probs.append("no Content-Type")
            else:
                for m in content:
                    if norm_media(m) == norm_media(ctype):
                        media = m
                if media is None:
                    probs.append(f"Content-Type {ctype!r} is not documented (documented: {list(content)})")
            if is_head:
                if body:
                    probs.append("a body in an answer to HEAD")
            elif media is not None:
                probs += self._check_body(media, content[media].get("schema", {}), body,
                                          stream_complete)
        if not probs:
            self.reached[key] = self.reached.get(key, 0) + 1
            if ctype and norm_media(ctype) == "application/json" and not is_head:
                value = strict_json(body)
                for f in CODE_FIELDS:
                    if isinstance(value, dict) and f in value:
                        k = (key, f, value[f])
                        self.codes[k] = self.codes.get(k, 0) + 1
        return probs

    def _check_body(self, media, schema, body, stream_complete):
        probs = []
        base = norm_media(media).split(";")[0]
        if base == "application/json":
            try:
                value = strict_json(body)
            except ValueError as e:
                return [f"the body is not strict JSON: {e}: {body[:200]!r}"]
            probs += self.schema_errors(schema, value)
        elif base == "application/x-ndjson":
            text = body.decode("utf-8", "replace")
            lines = text.split("\n")
            if stream_complete and lines[-1] != "":
                probs.append(f"the stream ends inside a line: {lines[-1]!r}")
            for line in lines[:-1]:
                try:
                    value = strict_json(line)
                except ValueError as e:
                    probs.append(f"a line is not strict JSON: {e}: {line[:200]!r}")
                    continue
                errs = self.schema_errors(schema, value)
                probs += [f"line {line[:120]!r}: {e}" for e in errs]
                if not errs and isinstance(value, dict):
                    k = (value.get("event"), value.get("reason"))
                    self.events[k] = self.events.get(k, 0) + 1
        elif base.startswith("text/"):
            try:
                value = body.decode("utf-8")
            except UnicodeDecodeError as e:
                return [f"the body is not UTF-8 text: {e}"]
            probs += self.schema_errors(schema, value)
        else:
            probs.append(f"the checker cannot read {media}")
        return probs

    def missing_coverage(self):
        return [k for k in self.coverage_keys() if k not in self.reached]

    def missing_codes(self):
        return [k for k in self.code_keys() if k not in self.codes]

    def missing_events(self):
        return [k for k in self.event_keys() if k not in self.events]

    def coverage_table(self):
        rows = ["| path | method | status | answers checked | documented codes reached |",
                "|---|---|---|---|---|"]
        for k in self.coverage_keys():
            what, a, b, st = k
            path = a if what == "op" else f"(x-other-responses: {a})"
            codes = ", ".join(f"{v} ({self.codes.get((k, f, v), 0) or 'NOT REACHED'})"
                              for f, vals in sorted(self.documented_codes(k).items()) for v in sorted(vals))
            rows.append(f"| {path} | {b} | {st} | {self.reached.get(k, 0) or 'NOT REACHED'} | {codes} |")
        rows.append("")
        rows += ["| held-stream event | reason | lines checked |", "|---|---|---|"]
        for k in self.event_keys():
            rows.append(f"| {k[0]} | {k[1] or '(none)'} | {self.events.get(k, 0) or 'NOT REACHED'} |")
        return "\n".join(rows)

    # ---- requests: does the document allow what a client sends? ----

    def request_problems(self, method, raw_path, headers=None, body=None):
        """What the document's request schemas say against this request
        (empty: a generated client may send it)."""
        probs = []
        tpl, item, params = self.match(raw_path)
        if tpl is None or method.lower() not in item:
            return [f"{method} {raw_path} is no documented operation"]
        op = item[method.lower()]
        query = urllib.parse.parse_qs(raw_path.split("?", 1)[1], keep_blank_values=True) \
            if "?" in raw_path else {}
        hdrs = {k.lower(): v for k, v in (headers or {}).items()}
        declared = [self.resolve(p) for p in item.get("parameters", []) + op.get("parameters", [])]
        for p in declared:
            if p["in"] == "path":
                # Decoded to text, as a client holds it: a standard validator
                # applies the schema to Unicode, not to bytes.
                try:
                    v = urllib.parse.unquote_to_bytes(params.get(p["name"], "")).decode("utf-8")
                except UnicodeDecodeError:
                    probs.append(f"path {p['name']}: not UTF-8, so no client can hold it as text")
                    continue
            elif p["in"] == "query":
                if p["name"] not in query:
                    continue
                v = query[p["name"]][0]
            elif p["in"] == "header":
                if p["name"].lower() not in hdrs:
                    continue
                v = hdrs[p["name"].lower()]
            else:
                continue
            probs += [f"{p['in']} {p['name']}: {e}" for e in
                      self.schema_errors(p.get("schema", {}), v, closed=False)]
        rb = self.resolve(op.get("requestBody", {}))
        if body is not None and len(body) > 0:
            limit = rb.get("x-max-body-bytes")
            if limit is not None and len(body) > limit:
                probs.append(f"the body is {len(body)} bytes, over x-max-body-bytes {limit}")
            elif body.strip():
                try:
                    value = strict_json(body)
                except ValueError as e:
                    probs.append(f"the body is not strict JSON: {e}")
                else:
                    schema = (rb.get("content") or {}).get("application/json", {}).get("schema", {})
                    probs += [f"body: {e}" for e in self.schema_errors(schema, value, closed=False)]
        elif rb.get("required"):
            probs.append("the body is required")
        return probs
