"""NCCL's hand-written XML reader, mirrored: text -> element tree (algo > gpu > tb > step).

The runtimes' reader (msccl-format.md section 2) accepts far less than XML and silently misreads
some of what it accepts. Well-formed tags go through a fast regular expression that accepts exactly
what NCCL accepts; anything else is replayed character by character as NCCL would, and where NCCL
would fail the problem is recorded as a ``Lexical`` and the tag is re-read leniently so that
checking can go on. Unknown elements are skipped as the runtimes skip them.

>>> algos, first = element_tree('<!-- c --> <algo a="1"><gpu id="0"/><copy/></algo>', [])
>>> first, algos[0].attrs, [g.name for g in algos[0].children]
('algo', {'a': '1'}, ['gpu'])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from synth.msccl.profiles import MAX_ATTRIBUTES, MAX_VALUE_CHARS

_NAME = r"[^\s<>/=\"'!?][^\s<>/=\"']*"
_TAG = re.compile(rf"<({_NAME})((?: (?:[^\s<>/=\"']+=\"[^\"]*\")?)*)(/?)>")
_ATTR = re.compile(r" (?:([^\s<>/=\"']+)=\"([^\"]*)\")?")
_PAIR = re.compile(r"([^\s<>/=\"']+)=\"([^\"]*)\"")
_CLOSE = re.compile(rf"</({_NAME})>")
_SPACE = re.compile(r"[ \r\n]*")
MAX_UNCLOSED = 16  # unclosed elements named one by one at the end of the text
_LENIENT_ATTR = re.compile(r"([^\s=/>]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s/>]*))")


@dataclass(frozen=True)
class Lexical:
    """A problem with the text itself. severity: "rejects" (the reader fails: no runtime loads
    the file), "misbehaves" (silently misread) or "note". ``truncated``: the text ends early (in a
    tag or comment, or with elements still open)."""

    line: int
    code: str
    message: str
    severity: str
    truncated: bool = False


class _Fail(Exception):
    """Where NCCL's reader would stop with an error; ``at_end``: because the text ended."""

    def __init__(self, message: str, at_end: bool = False):
        super().__init__(message)
        self.at_end = at_end


@dataclass(slots=True)
class _Node:
    kind: str  # "open", "single" or "close"
    name: str
    attrs: list  # (key, value) pairs as NCCL stores them (at most MAX_ATTRIBUTES, empty keys included)
    line: int
    dropped: int = 0


def _nccl_token(text: str, i: int, with_value: bool):
    """NCCL's xmlGetToken: a name up to ' ', '>', '/', LF or CR, or name="value"."""
    start, n = i, len(text)
    while True:
        if i >= n:
            raise _Fail("unexpected end of file", at_end=True)
        c = text[i]
        i += 1
        if c == "=":
            if not with_value:
                raise _Fail(f"unexpected value with name {text[start:i - 1]!r}")
            if i >= n:
                raise _Fail("unexpected end of file", at_end=True)
            if text[i] not in "\"'":
                raise _Fail("expected (double) quote")
            end = text.find('"', i + 1)
            if end < 0 or end + 1 >= n:
                raise _Fail("unexpected end of file inside a value", at_end=True)
            return text[start:i - 1], text[i + 1:end], text[end + 1], end + 2
        if i - start >= 255:
            raise _Fail("name too long (max 255)")
        if c in " >/\n\r":
            return text[start:i - 1], None, c, i


def _nccl_node(text: str, pos: int) -> tuple[_Node, int]:
    """NCCL's xmlGetNode at ``pos`` (which holds '<'); raises _Fail where NCCL fails."""
    name, _, last, i = _nccl_token(text, pos + 1, False)
    if name == "" and last == "/":
        name, _, last, i = _nccl_token(text, i, False)
        if last != ">":
            raise _Fail(f"unexpected trailing {last!r} in closing tag {name}")
        return _Node("close", name, [], pos), i
    attrs, dropped = [], 0
    while last == " ":
        key, value, last, i = _nccl_token(text, i, True)
        if len(attrs) < MAX_ATTRIBUTES:
            attrs.append((key, "" if value is None else value))
        elif key:
            dropped += 1
    kind = "open"
    if last == "/":
        kind = "single"
        _, _, last, i = _nccl_token(text, i, False)
    if last != ">":
        raise _Fail(f"expected '>', got {last!r}")
    return _Node(kind, name, attrs, pos, dropped), i


def _lenient_node(text: str, pos: int) -> tuple[_Node | None, int]:
    """Best-effort reading of a tag NCCL rejects, so that checking can go on."""
    i, quote, n = pos + 1, None, len(text)
    while i < n and (quote or text[i] != ">"):
        if quote and text[i] == quote:
            quote = None
        elif not quote and text[i] in "\"'":
            quote = text[i]
        i += 1
    body = text[pos + 1:i].strip()
    end = min(i + 1, n)
    if body.startswith(("?", "!")):
        return None, end
    closing = body.startswith("/")
    single = body.endswith("/")
    body = body.strip("/").strip()
    name = re.split(r"\s", body, maxsplit=1)[0] if body else ""
    rest = body[len(name):]
    attrs = [(k, a if a else b if b else c) for k, a, b, c in _LENIENT_ATTR.findall(rest)]
    return _Node("close" if closing else "single" if single else "open", name, attrs, pos), end


def _diagnose(text: str, pos: int, end: int) -> tuple[str, str]:
    """A specific code and message for a tag NCCL rejects."""
    tag = text[pos:end]
    if tag.startswith("<?"):
        return "xml-declaration", "XML declaration <?...?>: the runtimes' reader fails on '?'"
    if "\t" in tag:
        return "tab", "tab inside a tag: the runtimes' reader takes it as part of a name and fails"
    if "\n" in tag.strip() or "\r" in tag.strip():
        return ("multiline-tag",
                "attributes across lines: the reader ends the attribute list at the line break and fails")
    if "'" in tag:
        return "single-quote", "single-quoted value: the reader only ends a value at a double quote"
    if re.search(r"=[^\"']", tag) or re.search(r"\s=|=\s", tag):
        return "unquoted-value", "attribute value not in double quotes (or spaces around '='): the reader fails"
    return "syntax", "the runtimes' reader fails on this tag"


def _tokens(text: str, lexical: list) -> tuple[list[_Node], int]:
    """Split ``text`` into nodes as NCCL's reader would, recording problems; also the last line."""
    nodes, pos, n = [], 0, len(text)
    line, counted = 1, 0
    tag, close, space = _TAG.match, _CLOSE.match, _SPACE.match
    while True:
        pos = space(text, pos).end()
        line += text.count("\n", counted, pos)
        counted = pos
        if pos >= n:
            return nodes, line
        m = tag(text, pos)
        if m:
            body = m.group(2)
            if body.count(" ") > MAX_ATTRIBUTES:  # empty tokens (double spaces, " />") count too
                tokens = _ATTR.findall(body)
                lost = sum(1 for key, _ in tokens[MAX_ATTRIBUTES:] if key)  # dropping empty tokens is harmless
                nodes.append(_Node("single" if m.group(3) else "open", m.group(1), tokens[:MAX_ATTRIBUTES], line, lost))
            else:
                nodes.append(_Node("single" if m.group(3) else "open", m.group(1), _PAIR.findall(body), line))
            pos = m.end()
            continue
        m = close(text, pos)
        if m:
            nodes.append(_Node("close", m.group(1), [], line))
            pos = m.end()
            continue
        if text.startswith("<!--", pos):
            head = re.match(r"[^ >/\n\r]*", text[pos + 1:pos + 300]).group(0)
            if "=" in head:
                lexical.append(Lexical(line, "syntax", "'=' right after '<!--': the reader fails on it", "rejects"))
            end = text.find("-->", pos + 4)
            if end < 0:
                lexical.append(Lexical(line, "syntax", "unterminated comment", "rejects", truncated=True))
                return nodes, line + text.count("\n", pos)
            pos = end + 3
            continue
        if text[pos] != "<":
            ws = text[pos] in "\t\v\f"
            code, what = ("tab", "tab between elements") if ws else ("syntax", f"text {text[pos]!r} between elements")
            lexical.append(Lexical(line, code, f"{what}: the reader expects '<'", "rejects"))
            nxt = text.find("<", pos)
            pos = n if nxt < 0 else nxt
            continue
        try:
            node, end = _nccl_node(text, pos)
        except _Fail as exc:
            node, end = _lenient_node(text, pos)
            code, message = _diagnose(text, pos, end)
            cut = exc.at_end and text.find(">", pos) < 0  # the text ends inside this tag
            lexical.append(Lexical(line, code, f"{message} ({exc})", "rejects", truncated=cut))
        else:
            if any("'" in v for _, v in node.attrs):
                lexical.append(Lexical(line, "single-quote",
                                       "single-quoted value: the reader reads on to the next double quote", "rejects"))
        if node is not None:
            node.line = line
            nodes.append(node)
        pos = end


# ---------------------------------------------------------------------- tree
@dataclass(slots=True)
class Element:
    """An element the runtimes keep: name, attributes (first of repeated names), line, children."""

    name: str
    attrs: dict
    line: int
    children: list = field(default_factory=list)


_CHILD = {"top": "algo", "algo": "gpu", "gpu": "tb", "tb": "step"}


def _tree(nodes: list[_Node], lexical: list, end_line: int) -> tuple[list[Element], str | None]:
    """Nest nodes as the runtimes' handlers do (algo > gpu > tb > step); others are skipped."""
    algos: list[Element] = []
    stack: list[tuple[str, str, Element | None]] = []  # (element name, context, element)
    first = None
    for node in nodes:
        line = node.line
        if node.kind == "close":
            if not stack:
                lexical.append(Lexical(line, "syntax", f"closing tag </{node.name}> without an open element",
                                       "rejects"))
            elif stack[-1][0] == node.name:
                stack.pop()
            else:
                lexical.append(Lexical(line, "syntax", f"</{node.name}> closes <{stack[-1][0]}>", "rejects"))
                names = [s[0] for s in stack]
                if node.name in names:
                    del stack[len(names) - 1 - names[::-1].index(node.name):]
            continue
        if first is None:
            first = node.name
        if node.dropped:
            lexical.append(Lexical(line, "too-many-attributes",
                                   f"<{node.name}> has more than {MAX_ATTRIBUTES} attributes: "
                                   f"the last {node.dropped} are dropped", "misbehaves"))
        pairs = [kv for kv in node.attrs if kv[0]]
        attrs = dict(reversed(pairs))  # the reader returns the first of repeated names
        if len(attrs) != len(pairs):
            lexical.append(Lexical(line, "duplicate-attribute",
                                   f"<{node.name}> repeats an attribute: the first is used", "note"))
        for key, value in pairs:
            if len(value) > MAX_VALUE_CHARS:
                lexical.append(Lexical(line, "long-value", f"value of {key} longer than {MAX_VALUE_CHARS} "
                                       "characters overflows the reader's buffer", "misbehaves"))
        context = stack[-1][1] if stack else "top"
        parent = stack[-1][2] if stack else None
        if context == "step":
            lexical.append(Lexical(line, "syntax", f"<{node.name}> inside <step>: the runtimes' reader crashes",
                                   "rejects"))
            context = "skip"
        elif context != "skip" and node.name == _CHILD.get(context):
            elem = Element(node.name, attrs, line)
            if parent is None:
                algos.append(elem)
            else:
                parent.children.append(elem)
            if node.kind == "open":
                stack.append((node.name, node.name, elem))
            continue
        elif context != "skip":
            extra = (" (TACCL/TE-CCL <copy>: ignored by all runtimes, its copy does not happen)"
                     if node.name == "copy" else "")
            lexical.append(Lexical(line, "ignored-element", f"element <{node.name}> is ignored{extra}", "note"))
        if node.kind == "open":
            stack.append((node.name, "skip", None))
    for name, _, _ in reversed(stack[-MAX_UNCLOSED:]):
        lexical.append(Lexical(end_line, "syntax", f"<{name}> is never closed", "rejects", truncated=True))
    if len(stack) > MAX_UNCLOSED:
        lexical.append(Lexical(end_line, "syntax", f"{len(stack) - MAX_UNCLOSED} more elements are never closed",
                               "rejects", truncated=True))
    return algos, first


def element_tree(text: str, lexical: list) -> tuple[list[Element], str | None]:
    """The ``<algo>`` elements of ``text`` (nested as the runtimes nest them) and the name of the
    first element; problems are appended to ``lexical``."""
    nodes, end_line = _tokens(text, lexical)
    return _tree(nodes, lexical, end_line)
