#!/usr/bin/env python3
"""json_validate.py — checks completions against a JSON schema, independently of the server.

    json_validate.py SCHEMA_FILE RESPONSE_FILE...

Each RESPONSE_FILE is an OpenAI completion or chat completion response. Its text must parse
with Python's json module and validate against the schema: a small validator of the subset the
tests use (type, properties, required, additionalProperties, items, prefixItems, minItems,
maxItems, minLength, maxLength, enum, const, anyOf, oneOf, $ref to #/$defs). Prints one line per
response; exits 1 at the first that fails, naming why.
"""
import json
import sys


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


TYPES = {
    'object': lambda v: isinstance(v, dict),
    'array': lambda v: isinstance(v, list),
    'string': lambda v: isinstance(v, str),
    'integer': lambda v: isinstance(v, int) and not isinstance(v, bool),
    'number': lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    'boolean': lambda v: isinstance(v, bool),
    'null': lambda v: v is None,
}


def check(v, s, root, path):
    """The reason v does not validate against s, or None."""
    if s is True or s == {}:
        return None
    if '$ref' in s:
        name = s['$ref'].split('/')[-1]
        return check(v, root['$defs'][name], root, path)
    if 'const' in s and v != s['const']:
        return f'{path}: {v!r} is not {s["const"]!r}'
    if 'enum' in s and v not in s['enum']:
        return f'{path}: {v!r} is not one of {s["enum"]!r}'
    for key in ('anyOf', 'oneOf'):
        if key in s:
            errs = [check(v, sub, root, path) for sub in s[key]]
            ok = sum(e is None for e in errs)
            if ok == 0 or (key == 'oneOf' and ok > 1):
                return f'{path}: {key}: {errs}'
    t = s.get('type')
    if t is not None:
        names = t if isinstance(t, list) else [t]
        if not any(TYPES[n](v) for n in names):
            return f'{path}: {v!r} is not of type {t}'
    if isinstance(v, dict):
        props = s.get('properties', {})
        for r in s.get('required', []):
            if r not in v:
                return f'{path}: required {r!r} is missing'
        for k, x in v.items():
            if k in props:
                e = check(x, props[k], root, f'{path}/{k}')
                if e:
                    return e
            elif s.get('additionalProperties', False) is False:
                return f'{path}: {k!r} is not allowed'
            elif isinstance(s.get('additionalProperties'), dict):
                e = check(x, s['additionalProperties'], root, f'{path}/{k}')
                if e:
                    return e
    if isinstance(v, list):
        if len(v) < s.get('minItems', 0) or len(v) > s.get('maxItems', len(v)):
            return f'{path}: {len(v)} items'
        pre = s.get('prefixItems', [])
        for i, x in enumerate(v):
            sub = pre[i] if i < len(pre) else s.get('items', True)
            e = check(x, sub, root, f'{path}/{i}')
            if e:
                return e
    if isinstance(v, str):
        if len(v) < s.get('minLength', 0) or len(v) > s.get('maxLength', len(v)):
            return f'{path}: a string of {len(v)} characters'
    return None


def main():
    schema = json.load(open(sys.argv[1]))
    for name in sys.argv[2:]:
        resp = json.load(open(name))
        choice = resp['choices'][0]
        text = choice['text'] if 'text' in choice else choice['message']['content']
        try:
            value = json.loads(text)
        except ValueError as e:
            fail(f'{name}: the text does not parse as JSON ({e}): {text!r}')
        why = check(value, schema, schema, '')
        if why:
            fail(f'{name}: {why}: {text!r}')
        print(f'{name}: valid, {resp["usage"]["completion_tokens"]} tokens, '
              f'finish_reason {choice["finish_reason"]}')


if __name__ == '__main__':
    main()
