#!/usr/bin/env python3
"""Renders chat templates with Jinja2 as transformers sets it up
(trim_blocks, lstrip_blocks, loop controls, tojson with ensure_ascii off,
raise_exception, strftime_now), but in the mutable sandbox, so list.append
works as llama.cpp's renderer lets it.  test_jinja_ref.js asks it where
@huggingface/jinja fails: if Jinja2 renders, exld must render too.

stdin: [{"file": PATH, "context": {...}}, ...]; stdout: [{"out": TEXT} or
{"err": MESSAGE, "raised": BOOL}, ...].  Exits 77 without Jinja2."""
import datetime
import json
import sys

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import SandboxedEnvironment
except ImportError:
    print("skipped: no python3-jinja2")
    sys.exit(77)


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


NOW = datetime.datetime(2024, 7, 26, 9, 15)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def main():
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    results = []
    for case in json.load(sys.stdin):
        try:
            with open(case["file"], encoding="utf-8") as f:
                tmpl = env.from_string(f.read())
            results.append({"out": tmpl.render(**case["context"])})
        except Raised as e:
            results.append({"err": str(e), "raised": True})
        except Exception as e:  # the template's own failure, whatever it is
            results.append({"err": "%s: %s" % (type(e).__name__, e), "raised": False})
    json.dump(results, sys.stdout)


main()
