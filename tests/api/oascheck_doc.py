"""oascheck_doc.py - the document itself (oascheck.py holds answers to it):
api/openapi.yaml against the official OpenAPI 3.1 meta-schema, every Schema
Object against JSON Schema 2020-12 and the OAS base vocabulary, keywords
spelled as JSON Schema knows them, every $ref, operation and path
parameter."""
import jsonschema

from oascheck import *  # noqa: F401,F403


def check_document(doc, oas_schemas):
    """oas_schemas: {'schema': OAS 3.1 meta-schema, 'meta': OAS base vocabulary
    meta-schema}. Returns the problems found."""
    probs = []
    for e in jsonschema.Draft202012Validator(oas_schemas["schema"]).iter_errors(doc):
        probs.append(f"OpenAPI 3.1 meta-schema: {'/'.join(map(str, e.absolute_path))}: {e.message}")
    if not str(doc.get("openapi", "")).startswith("3.1."):
        probs.append(f"openapi is {doc.get('openapi')!r}; this checker reads OpenAPI 3.1")

    # Every $ref resolves.
    def refs(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "$ref" and isinstance(v, str):
                    try:
                        pointer_get(doc, v)
                    except (KeyError, IndexError, ValueError):
                        probs.append(f"{path}: $ref {v} does not resolve")
                else:
                    refs(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                refs(v, f"{path}/{i}")
    refs(doc, "#")
    if probs:
        return probs
    spec = Spec(doc)

    # Every Schema Object: JSON Schema 2020-12, the OAS vocabulary, known keywords.
    meta = jsonschema.Draft202012Validator(oas_schemas["meta"])

    def schema_obj(s, where):
        if isinstance(s, bool):
            return
        if not isinstance(s, dict):
            probs.append(f"{where}: a schema must be an object or a boolean")
            return
        try:
            jsonschema.Draft202012Validator.check_schema(s)
        except jsonschema.SchemaError as e:
            probs.append(f"{where}: not JSON Schema 2020-12: {e.message}")
        for e in meta.iter_errors(s):
            probs.append(f"{where}: OAS base vocabulary: {e.message}")
        for k in s:
            if k not in SCHEMA_KEYWORDS and not k.startswith("x-"):
                probs.append(f"{where}: unknown keyword {k!r}")
        for ex in s.get("examples", []) if isinstance(s.get("examples"), list) else []:
            for e in spec.schema_errors(s, ex, closed=False):
                probs.append(f"{where}: example {ex!r}: {e}")
        for k, sub in subschemas(s):
            schema_obj(sub, f"{where}/{k}")
    for i, s in enumerate(Spec._schema_positions(doc)):
        schema_obj(s, f"schema #{i}")

    # Operations: responses, unique ids, declared path parameters.
    ids = {}
    for tpl, m, op in spec.operations():
        where = f"{m.upper()} {tpl}"
        if not op.get("responses"):
            probs.append(f"{where}: no responses")
        for st in op.get("responses", {}):
            if not re.fullmatch(r"[1-5][0-9][0-9]", str(st)):
                probs.append(f"{where}: response key {st!r} is not a status code")
        oid = op.get("operationId")
        if not oid:
            probs.append(f"{where}: no operationId")
        elif oid in ids:
            probs.append(f"{where}: operationId {oid} also used by {ids[oid]}")
        ids[oid] = where
        item = doc["paths"][tpl]
        declared = [spec.resolve(p) for p in item.get("parameters", []) + op.get("parameters", [])]
        for name in re.findall(r"\{([^}]+)\}", tpl):
            if not any(p["in"] == "path" and p["name"] == name and p.get("required") for p in declared):
                probs.append(f"{where}: path parameter {name} is not declared as required")
        rb = spec.resolve(op.get("requestBody", {}))
        if rb and not isinstance(rb.get("x-max-body-bytes"), int):
            probs.append(f"{where}: the request body has no x-max-body-bytes")
        for st, r in op.get("responses", {}).items():
            for media, mt in (spec.resolve(r).get("content") or {}).items():
                if "schema" not in mt:
                    probs.append(f"{where} {st} {media}: no schema")
    other = doc.get("x-other-responses")
    if not isinstance(other, dict):
        probs.append("x-other-responses is missing")
    else:
        for k in other:
            if k not in OTHER_CATEGORIES + ["description"]:
                probs.append(f"x-other-responses: unknown category {k}")
        for cat in OTHER_CATEGORIES:
            for st in other.get(cat) or {}:
                if not re.fullmatch(r"[1-5][0-9][0-9]", str(st)):
                    probs.append(f"x-other-responses/{cat}: {st!r} is not a status code")

    # Nothing defined and never used.
    text = json.dumps(doc)
    for kind, entries in doc.get("components", {}).items():
        if kind == "securitySchemes":
            continue
        for name in entries:
            if f'"#/components/{kind}/{name}"' not in text:
                probs.append(f"components/{kind}/{name} is never referenced")
    return probs
