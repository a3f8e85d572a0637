#!/usr/bin/env python3
"""Constrained decoding on stories260K, a model that knows nothing of JSON:
sampled completions (temperature 1, 20 seeds each) under JSON schemas,
regular expressions and GBNF grammars, each checked by an independent
judge -- Python's jsonschema (with format checks), re.fullmatch, and small
hand-written parsers.  Every completion must finish (the constraint
complete: stop reason end_filter, or stop_token once complete); one that
runs into max_new_tokens fails the test.  Half the seeds run with
--prefer-eos, which must end exactly when the constraint is complete.

    test_grammar_gen.py PATH/TO/exld [json|regex|gbnf|options] [SEEDS]

SEEDS (default 20): fewer under the sanitizers, where each run is slow.
"""
import copy
import datetime
import json
import os
import random
import re
import subprocess
import sys
import tempfile

SEEDS = range(1, 21)
PROMPT = "Once upon a time"
MAX_NEW = 4096

# ---- JSON schemas (every string, array and number bounded) ----

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$"},
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string", "maxLength": 20},
                    "city": {"type": "string", "minLength": 2, "maxLength": 12},
                    "country": {"enum": ["DE", "FR", "GB", "US"]},
                },
                "required": ["city", "country"],
                "additionalProperties": False,
            },
            "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3},
            "married": {"type": "boolean"},
        },
        "required": ["name", "age", "address"],
        "additionalProperties": False,
    },
    "inventory": {
        "type": "array",
        "minItems": 1,
        "maxItems": 3,
        "items": {
            "type": "object",
            "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                "qty": {"type": "integer", "minimum": 0, "maximum": 500},
                "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
                "tags": {"type": "array", "items": {"enum": ["new", "sale", "old"]},
                         "maxItems": 2},
            },
            "required": ["sku", "qty"],
            "additionalProperties": False,
        },
    },
    "tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 6},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                 "maxItems": 2},
                },
                "required": ["name", "children"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    "shapes": {
        "type": "object",
        "properties": {
            "kind": {"enum": ["circle", "square", "triangle"]},
            "size": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 9},
                               {"type": "null"}]},
            "color": {"const": "red"},
            "when": {"type": "string", "format": "date"},
            "corners": {"type": "array", "prefixItems": [{"type": "number", "minimum": -10,
                                                          "maximum": 10},
                                                         {"type": "boolean"}],
                        "items": False, "minItems": 1},
        },
        "required": ["kind", "size", "color", "when", "corners"],
        "additionalProperties": False,
    },
    "event": {
        "definitions": {"id": {"type": "string", "format": "uuid"}},
        # closed where every property is declared; the branches constrain
        "properties": {"id": True, "at": True, "start": True, "note": {}, "level": {}},
        "allOf": [
            {"type": "object", "properties": {"id": {"$ref": "#/definitions/id"}},
             "required": ["id"]},
            {"properties": {"at": {"type": "string", "format": "date-time"},
                            "start": {"type": "string", "format": "time"},
                            "note": {"type": ["string", "null"], "maxLength": 12},
                            "level": {"type": "integer", "exclusiveMinimum": -3,
                                      "exclusiveMaximum": 3}},
             "required": ["at", "start", "note", "level"]},
        ],
        "additionalProperties": False,
    },
    # oneOf, accepted because its branches exclude each other: a tagged
    # union (the tag required, const / enum values apart; through $ref and
    # inline), by type, and by range with an integer and a number branch.
    "tagged": {
        "$defs": {
            "cat": {"type": "object",
                    "properties": {"kind": {"const": "cat"},
                                   "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
                    "required": ["kind", "lives"], "additionalProperties": False},
            "dog": {"type": "object",
                    "properties": {"kind": {"enum": ["dog", "puppy"]},
                                   "breed": {"enum": ["pug", "lab", "collie"]}},
                    "required": ["kind"], "additionalProperties": False},
        },
        "type": "object",
        "properties": {
            "pet": {"oneOf": [
                {"$ref": "#/$defs/cat"},
                {"$ref": "#/$defs/dog"},
                {"type": "object",
                 "properties": {"kind": {"const": "fish"},
                                "fins": {"type": "integer", "minimum": 0, "maximum": 8}},
                 "required": ["kind", "fins"], "additionalProperties": False},
            ]},
            "owner": {"oneOf": [{"type": "string", "maxLength": 8},
                                {"type": "integer", "minimum": 0, "maximum": 99},
                                {"type": "null"}]},
            "score": {"oneOf": [{"type": "integer", "minimum": -9, "maximum": -1},
                                {"type": "number", "minimum": 0, "maximum": 5}]},
        },
        "required": ["pet", "owner", "score"],
        "additionalProperties": False,
    },
}


def _words(n, seed):
    rnd = random.Random(seed)
    words = set()
    while len(words) < n:
        words.add("".join(rnd.choice("abcdefghijklmnopqrstuvwxyz")
                          for _ in range(rnd.randint(2, 9))))
    return sorted(words)


# A long enum (the grammar spells it as a prefix tree).
SCHEMAS["cities"] = {
    "type": "object",
    "properties": {"from": {"enum": _words(3000, 7)}, "to": {"enum": _words(3000, 8)},
                   "stops": {"type": "array", "items": {"enum": _words(50, 9)}, "maxItems": 3}},
    "required": ["from", "to"],
    "additionalProperties": False,
}

# ---- regular expressions ----

REGEXES = [
    r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}",
    r"\d{3}-\d{3}-\d{4}",
    r"(yes|no|maybe)(, (yes|no|maybe)){0,3}\.",
    r"[a-z]{1,10}@[a-z]{1,8}\.(com|org|net)",
    r"#[0-9a-fA-F]{6}",
    r"(?:[^\x00-\x7f]{1,2}|x)y[^\n]{0,6}",
]

# ---- GBNF grammars and their judges ----


def check_words(text):
    return re.fullmatch(r"[a-z]{1,8}(, [a-z]{1,8}){0,4}\.", text) is not None


def check_groups(text):
    """group ::= "(" item ( " " item ){0,2} ")";  item ::= [a-z]{1,4} | group"""
    pos = 0

    def group():
        nonlocal pos
        if pos >= len(text) or text[pos] != "(":
            return False
        pos += 1
        for i in range(3):
            if i:
                if pos < len(text) and text[pos] == " ":
                    pos += 1
                else:
                    break
            if pos < len(text) and text[pos] == "(":
                if not group():
                    return False
            else:
                m = re.match(r"[a-z]{1,4}", text[pos:])
                if not m:
                    return False
                pos += m.end()
        if pos < len(text) and text[pos] == ")":
            pos += 1
            return True
        return False

    return group() and pos == len(text)


def check_quote(text):
    return re.fullmatch('say "[a-z ]{1,20}"(\n|\u2603)', text) is not None


GRAMMARS = [
    ("words", 'root ::= word ( ", " word ){0,4} "."\nword ::= [a-z]{1,8}\n', check_words),
    ("groups",
     '# nested groups\nroot ::= group\n'
     'group ::= "(" item ( " " item ){0,2} ")"\n'
     'item ::= [a-z]{1,4} | group\n', check_groups),
    ("quote", 'root ::= "say \\"" [a-z ]{1,20} "\\"" ( "\\n" | "\\u2603" )\n', check_quote),
]

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg)


def skip(msg):
    print("skipped:", msg)
    sys.exit(77)


def run(exld, model, args, seed, prefer, prompt=PROMPT):
    cmd = [exld, "run", "--model", model, "--prompt", prompt, "--temperature", "1",
           "--seed", str(seed), "-n", str(MAX_NEW), "--threads", "1", "--completion-only",
           "--json"] + args + (["--prefer-eos"] if prefer else [])
    p = subprocess.run(cmd, capture_output=True, timeout=600)
    if p.returncode != 0:
        fail("%s: exit %d: %s" % (" ".join(cmd[4:]), p.returncode, p.stderr.decode(errors="replace")))
        return None
    return json.loads(p.stdout.decode())


def finished(r, what, prefer):
    """The completion must have ended because the constraint was complete."""
    reason = r["stop_reason"]
    if prefer and reason != "end_filter":
        fail("%s: with --prefer-eos the stop reason is %s, not end_filter (%d tokens): %r"
             % (what, reason, r["new_tokens"], r["text"][:200]))
        return False
    if reason not in ("end_filter", "stop_token"):
        fail("%s: did not finish: stop reason %s after %d tokens: %r"
             % (what, reason, r["new_tokens"], r["text"][:200]))
        return False
    return True


TIME_RE = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|z|[+-](\d{2}):(\d{2}))")


def is_time(s):
    m = TIME_RE.fullmatch(s)
    if not m:
        return False
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if h > 23 or mi > 59 or sec > 59:
        return False
    if m.group(6) and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return True


def is_date_time(s):
    if len(s) < 11 or s[10] not in "Tt":
        return False
    try:
        datetime.date.fromisoformat(s[:10])
    except ValueError:
        return False
    return is_time(s[11:])


def validator_for(schema):
    import jsonschema
    cls = jsonschema.Draft202012Validator
    fc = copy.deepcopy(cls.FORMAT_CHECKER)
    fc.checks("time")(is_time)
    fc.checks("date-time")(is_date_time)
    cls.check_schema(schema)
    return cls(schema, format_checker=fc)


def case_json(exld, model, tmp):
    for name, schema in SCHEMAS.items():
        path = os.path.join(tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(schema, f)
        v = validator_for(schema)
        ok = 0
        for seed in SEEDS:
            prefer = seed % 2 == 0
            what = "schema %s seed %d%s" % (name, seed, " prefer-eos" if prefer else "")
            r = run(exld, model, ["--json-schema", path], seed, prefer)
            if r is None or not finished(r, what, prefer):
                continue
            try:
                doc = json.loads(r["text"])
            except ValueError as e:
                fail("%s: not JSON (%s): %r" % (what, e, r["text"]))
                continue
            errors = list(v.iter_errors(doc))
            if errors:
                fail("%s: invalid: %s: %r" % (what, errors[0].message, r["text"]))
                continue
            ok += 1
        print("schema %-10s %d/%d completions valid" % (name, ok, len(SEEDS)))


def case_regex(exld, model, tmp):
    for rx in REGEXES:
        ok = 0
        for seed in SEEDS:
            prefer = seed % 2 == 0
            what = "regex /%s/ seed %d%s" % (rx, seed, " prefer-eos" if prefer else "")
            r = run(exld, model, ["--regex", rx], seed, prefer)
            if r is None or not finished(r, what, prefer):
                continue
            if not re.fullmatch(rx, r["text"]):
                fail("%s: %r does not match" % (what, r["text"]))
                continue
            ok += 1
        print("regex %-40s %d/%d completions match" % (rx, ok, len(SEEDS)))


def case_gbnf(exld, model, tmp):
    for name, text, judge in GRAMMARS:
        path = os.path.join(tmp, name + ".gbnf")
        with open(path, "w") as f:
            f.write(text)
        ok = 0
        for seed in SEEDS:
            prefer = seed % 2 == 0
            what = "grammar %s seed %d%s" % (name, seed, " prefer-eos" if prefer else "")
            r = run(exld, model, ["--grammar", path], seed, prefer)
            if r is None or not finished(r, what, prefer):
                continue
            if not judge(r["text"]):
                fail("%s: %r is not in the language" % (what, r["text"]))
                continue
            ok += 1
        print("grammar %-8s %d/%d completions in the language" % (name, ok, len(SEEDS)))


def case_options(exld, model, tmp):
    """The constraint together with the other things that shape the text."""
    word = r"[A-Za-z]{1,10}( [a-z]{1,10}){0,5}\."
    for seed in range(1, 11):
        # An empty prompt: SentencePiece drops the first token's leading
        # space, and the constraint judges the text without it.
        r = run(exld, model, ["--regex", word], seed, False, prompt="")
        if r and finished(r, "empty prompt seed %d" % seed, False) and \
                not re.fullmatch(word, r["text"]):
            fail("empty prompt seed %d: %r does not match" % (seed, r["text"]))
        # Token healing: the completion starts after the healed bytes.
        r = run(exld, model, ["--regex", r"[a-z]{0,6}[,.] [a-z]{1,8}\.", "--token-healing"], seed,
                False, prompt="Once upon a ti")
        if r and finished(r, "healing seed %d" % seed, False) and \
                not re.fullmatch(r"[a-z]{0,6}[,.] [a-z]{1,8}\.", r["text"]):
            fail("healing seed %d: %r does not match" % (seed, r["text"]))
        # Banned strings rewind the job; the filter follows.
        r = run(exld, model, ["--regex", r"([a-z]{1,6} ){1,6}[a-z]{1,6}\.", "--ban", "the",
                              "--ban", "a "], seed, False)
        if r and finished(r, "ban seed %d" % seed, False):
            if not re.fullmatch(r"([a-z]{1,6} ){1,6}[a-z]{1,6}\.", r["text"]):
                fail("ban seed %d: %r does not match" % (seed, r["text"]))
            if "the" in r["text"] or "a " in r["text"]:
                fail("ban seed %d: %r holds a banned string" % (seed, r["text"]))
    # Greedy decoding under a constraint is deterministic.
    a = run(exld, model, ["--regex", word, "--temperature", "0"], 1, False)
    b = run(exld, model, ["--regex", word, "--temperature", "0"], 2, False)
    if a and b and a["text"] != b["text"]:
        fail("greedy under a regex differs between seeds: %r %r" % (a["text"], b["text"]))
    # A bad constraint is refused with a message naming it, exit status 1.
    p = subprocess.run([exld, "run", "--model", model, "--prompt", PROMPT, "--regex", "(a"],
                       capture_output=True)
    if p.returncode == 0 or b"regex: at offset 0: '(' without a matching ')'" not in p.stderr:
        fail("bad regex: exit %d, %r" % (p.returncode, p.stderr))
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"type":"integer","multipleOf":2}')
    p = subprocess.run([exld, "run", "--model", model, "--prompt", PROMPT, "--json-schema", bad],
                       capture_output=True)
    if p.returncode == 0 or b"json_schema: at #/multipleOf: keyword 'multipleOf' is not supported" \
            not in p.stderr:
        fail("bad schema: exit %d, %r" % (p.returncode, p.stderr))
    # A oneOf whose branches overlap (3 is valid under both, so a 3 would
    # be invalid) is refused, not written as anyOf.
    with open(bad, "w") as f:
        json.dump({"oneOf": [{"type": "integer", "minimum": 0, "maximum": 50},
                             {"type": "number", "minimum": 0, "maximum": 50}]}, f)
    p = subprocess.run([exld, "run", "--model", model, "--prompt", PROMPT, "--json-schema", bad],
                       capture_output=True)
    if p.returncode == 0 or b"json_schema: at #/oneOf: branches 0 and 1 may both match one " \
            b"value (both allow integers)" not in p.stderr:
        fail("overlapping oneOf: exit %d, %r" % (p.returncode, p.stderr))
    p = subprocess.run([exld, "run", "--model", model, "--prompt", PROMPT, "--regex", "a",
                        "--grammar", bad], capture_output=True)
    if p.returncode != 2 or b"at most one of --grammar, --json-schema and --regex" not in p.stderr:
        fail("two constraints: exit %d, %r" % (p.returncode, p.stderr))
    print("options checked")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    exld = sys.argv[1]
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    if len(sys.argv) > 3:
        global SEEDS
        SEEDS = range(1, 1 + int(sys.argv[3]))
    models = os.environ.get("EXLD_MODELS", "")
    model = os.path.join(models, "stories260K.gguf")
    if not models or not os.path.isfile(model):
        skip("EXLD_MODELS (%r) has no stories260K.gguf" % models)
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        skip("python3-jsonschema is not installed (tests/install-deps.sh installs it)")
    cases = {"json": case_json, "regex": case_regex, "gbnf": case_gbnf, "options": case_options}
    if which != "all" and which not in cases:
        print("unknown case", which)
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="exld-grammar-") as tmp:
        for name, fn in cases.items():
            if which in ("all", name):
                fn(exld, model, tmp)
    print("%d failures" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
