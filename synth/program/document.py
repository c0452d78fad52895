"""``synth.program``: the Program IR as JSON, validated against synth/schemas/program.schema.json.

Version 1 is MSCCL's model; version 2 adds switch ops (``glre``, ``gstore``, ``glres`` with
``switch_id``, ``srcs`` and ``dsts``; synth.program.ir). A program without switch ops is written
as version 1, exactly as before; one with them as version 2, which a version 1 reader refuses in
one line instead of misreading.

One op per line keeps files diffable. Reading validates the document with the shipped JSON
Schema first, so any structural problem is one InputError line naming the JSON path.

>>> from synth.program.ir import Op, Program, RankProgram, Threadblock
>>> tb = Threadblock(0, send=1, recv=-1, channel=0, ops=(Op("s", "i", 0, "o", 0, 1),))
>>> p = Program("x", "custom", 2, "Simple", 1, False, True, 1,
...             (RankProgram(0, 1, 1, 0, (tb,)), RankProgram(1, 1, 1, 0, ())))
>>> program_from_dict(program_to_dict(p)) == p
True
>>> program_from_dict({"format": "synth.program", "version": 1})
Traceback (most recent call last):
synth.core.errors.InputError: program: missing key 'name'
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from synth.core.errors import InputError
from synth.program.ir import SWITCH_TYPES, Op, Program, RankProgram, Threadblock

PROGRAM_FORMAT = "synth.program"
PROGRAM_VERSION = 1  # written when the program has no switch op
PROGRAM_SWITCH_VERSION = 2  # switch ops
PROGRAM_VERSIONS = (PROGRAM_VERSION, PROGRAM_SWITCH_VERSION)
_OP_FIELDS = ("type", "src_buf", "src_off", "dst_buf", "dst_off", "count")
_SWITCH_FIELDS = ("switch_id", "srcs", "dsts")


@lru_cache(maxsize=1)
def program_schema() -> dict[str, Any]:
    """The JSON Schema of synth.program (shipped as synth/schemas/program.schema.json)."""
    text = resources.files("synth").joinpath("schemas", "program.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    # JSON integers only: jsonschema would otherwise accept 8.0 (and True) as an integer.
    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool))
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)
    return cls(program_schema())


def validate_program_doc(doc: Any, where: str = "program") -> None:
    """InputError (one line, with the JSON path) unless ``doc`` is a valid synth.program document."""
    if (isinstance(doc, dict) and doc.get("format") == PROGRAM_FORMAT and "version" in doc
            and (type(doc["version"]) is not int or doc["version"] not in PROGRAM_VERSIONS)):
        raise InputError(f"{where}: unsupported {PROGRAM_FORMAT} version {doc.get('version')!r} "
                         f"(this synth reads versions {PROGRAM_VERSION} and {PROGRAM_SWITCH_VERSION})")
    try:
        error = best_match(_validator().iter_errors(doc))
    except RecursionError:
        raise InputError(f"{where}: nested too deeply") from None
    if error is not None:
        raise InputError(f"{where}: {_message(error)}")


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "anyOf" and error.context:
        error = best_match(error.context) or error
    path = ""
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    at = f"{path}: " if path else ""
    schema, instance = error.schema, error.instance
    if error.validator == "additionalProperties":
        extra = sorted(set(instance) - set(schema.get("properties", {})))
        return f"{at}unknown key {extra[0]!r}"
    if error.validator == "required":
        return f"{at}missing key {next(k for k in schema['required'] if k not in instance)!r}"
    if error.validator == "enum":
        return f"{at}must be one of {', '.join(map(repr, schema['enum']))}, got {json.dumps(instance)}"
    shown = json.dumps(instance)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    if "description" in schema:
        return f"{at}must be {schema['description']}, got {shown}"
    return f"{at}{error.message[:120]}"


def _op_dict(op: Op) -> dict[str, Any]:
    out = {name: getattr(op, name) for name in _OP_FIELDS}
    if op.dep_tb >= 0 or op.dep_op >= 0:
        out["dep_tb"], out["dep_op"] = op.dep_tb, op.dep_op
    if op.has_dep:
        out["has_dep"] = True
    if op.switches:
        out.update(switch_id=op.switch_id, srcs=list(op.srcs), dsts=list(op.dsts))
    return out


def program_to_dict(program: Program) -> dict[str, Any]:
    """The synth.program document of ``program`` (version 2 when it has switch ops, else 1)."""
    version = PROGRAM_SWITCH_VERSION if program.switch_ops else PROGRAM_VERSION
    return {
        "format": PROGRAM_FORMAT, "version": version, "name": program.name,
        "collective": program.collective, "ranks": program.ranks, "protocol": program.protocol,
        "chunks_per_loop": program.chunks_per_loop, "inplace": program.inplace,
        "outofplace": program.outofplace, "channels": program.channels,
        "min_bytes": program.min_bytes, "max_bytes": program.max_bytes, "meta": dict(program.meta),
        "gpus": [{"rank": g.rank, "input_chunks": g.input_chunks, "output_chunks": g.output_chunks,
                  "scratch_chunks": g.scratch_chunks,
                  "threadblocks": [{"id": tb.id, "send": tb.send, "recv": tb.recv, "channel": tb.channel,
                                    "ops": [_op_dict(op) for op in tb.ops]} for tb in g.threadblocks]}
                 for g in program.gpus],
    }


def _op(op: dict, version: int, where: str) -> Op:
    """One op of a validated document: switch fields exactly on switch ops (version 2 only)."""
    switching = op["type"] in SWITCH_TYPES
    present = [key for key in _SWITCH_FIELDS if key in op]
    if switching and version < PROGRAM_SWITCH_VERSION:
        raise InputError(f"{where}: type: a switch op ({op['type']}) needs {PROGRAM_FORMAT} version "
                         f"{PROGRAM_SWITCH_VERSION}, the file says version {version}")
    if switching and len(present) < len(_SWITCH_FIELDS):
        missing = next(key for key in _SWITCH_FIELDS if key not in op)
        raise InputError(f"{where}: missing key {missing!r} (a switch op names its switch_id, srcs and dsts)")
    if not switching and present:
        raise InputError(f"{where}: {present[0]!r} belongs to switch ops ({', '.join(SWITCH_TYPES)}), not {op['type']}")
    extra = (op["switch_id"], tuple(op["srcs"]), tuple(op["dsts"])) if switching else ()
    return Op(*(op[name] for name in _OP_FIELDS), op.get("dep_tb", -1), op.get("dep_op", -1),
              op.get("has_dep", False), *extra)


def program_from_dict(doc: Any, where: str = "program") -> Program:
    """The Program of a synth.program document; InputError (one line) when it is malformed."""
    validate_program_doc(doc, where)
    gpus = []
    for index, g in enumerate(doc["gpus"]):
        if g["rank"] != index:
            raise InputError(f"{where}: gpus[{index}].rank: must be {index} (ranks in order), got {g['rank']}")
        tbs = tuple(
            Threadblock(tb["id"], tb["send"], tb["recv"], tb["channel"],
                        tuple(_op(op, doc["version"], f"{where}: gpus[{index}].threadblocks[{t}].ops[{k}]")
                              for k, op in enumerate(tb["ops"])))
            for t, tb in enumerate(g["threadblocks"]))
        gpus.append(RankProgram(g["rank"], g["input_chunks"], g["output_chunks"], g["scratch_chunks"], tbs))
    if len(gpus) != doc["ranks"]:
        raise InputError(f"{where}: gpus: {len(gpus)} rank programs for {doc['ranks']} ranks")
    return Program(doc["name"], doc["collective"], doc["ranks"], doc["protocol"], doc["chunks_per_loop"],
                   doc["inplace"], doc["outofplace"], doc["channels"], tuple(gpus), doc.get("min_bytes", 0),
                   doc.get("max_bytes"), doc.get("meta", {}))


def program_to_json(program: Program) -> str:
    """JSON text of ``program``: the header indented, one thread block header and one op per line."""
    doc = program_to_dict(program)
    gpus = doc.pop("gpus")
    head = json.dumps(doc, indent=1)
    parts = []
    for g in gpus:
        tbs = g.pop("threadblocks")
        rendered = []
        for tb in tbs:
            ops = tb.pop("ops")
            lines = ",\n".join("    " + json.dumps(op) for op in ops)
            rendered.append("   " + json.dumps(tb)[:-1] + ', "ops": [' + (f"\n{lines}\n   " if ops else "") + "]}")
        body = ",\n".join(rendered)
        parts.append("  " + json.dumps(g)[:-1] + ', "threadblocks": [' + (f"\n{body}\n  " if tbs else "") + "]}")
    return head[:-2] + ',\n "gpus": [\n' + ",\n".join(parts) + "\n ]\n}\n"


def program_from_json(text: str, where: str = "program") -> Program:
    """Parse synth.program JSON text (InputError, one line, when it is not a valid document)."""
    from synth.core.io import parse_json

    return program_from_dict(parse_json(text, where), where)


def load_program(path) -> Program:
    """Read a synth.program file; any problem is one InputError line naming the file."""
    from synth.core.io import read_json

    return program_from_dict(read_json(path), where=str(path))
