"""``ssl.principal.mapping.rules``: the name a TLS client's certificate gives, as Kafka's
SslPrincipalMapper computes it.

The rules are a comma-separated list of ``DEFAULT`` (the distinguished name unchanged) and
``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower or
upper case the result). They are parsed with Kafka's own two regular expressions, so what
Kafka accepts or refuses is accepted or refused here, empty rules (``,,``) are skipped, and a
``\\/`` in a pattern or replacement is a slash that does not end it. Applied to the client
certificate's subject in RFC 2253 form (``CN=alice,OU=eng,O=Example``), the first rule whose
pattern matches the whole name gives the principal's name: Java's ``replaceAll`` of the
pattern by the replacement, where ``$n`` is group n and ``\\x`` a literal x. A ``$n`` beyond
the pattern's groups is literal text, and ``$12`` with fewer than 12 groups is group 1 and a
"2" (Kafka's escapeLiteralBackReferences, taken from Apache NiFi). When no rule applies the
name has no mapping: Kafka fails that connection's authentication, and so does the broker.

Departures: the patterns are Java regular expressions compiled by Python's ``re`` (with
``re.ASCII``, so ``\\w`` and ``\\d`` mean what they mean in Java). The common syntax is the same;
what Python lacks (``\\p{Lu}`` classes, ``\\Q...\\E`` quoting) is refused at start with the
property's name rather than silently meaning something else.
"""

import re

# Kafka's SslPrincipalMapper.RULE_PATTERN, RULE_SPLITTER and RULE_PARSER, verbatim.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule gives a name for a distinguished name (Kafka's NoMatchingRule)."""


class Rule:
    """``DEFAULT`` (``pattern`` None) or ``RULE:pattern/replacement/[LU]``."""

    def __init__(
        self,
        pattern: str | None = None,
        replacement: str = "",
        lower: bool = False,
        upper: bool = False,
    ) -> None:
        self.source = pattern
        self.pattern = None if pattern is None else re.compile(pattern, re.ASCII)
        self.replacement = replacement
        self.lower = lower
        self.upper = upper

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        groups = self.pattern.groups
        replacement = _escape_literal_back_references(self.replacement, groups)
        result = self.pattern.sub(lambda match: _java_replacement(replacement, match), name)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        """As Kafka's Rule.toString writes it (its tests compare these)."""
        if self.pattern is None:
            return "DEFAULT"
        text = "RULE:" + (self.source or "") + "/" + self.replacement
        if self.lower:
            text += "/L"
        elif self.upper:
            text += "/U"
        return text


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's escapeLiteralBackReferences: a ``$n`` naming no group becomes literal text
    (``$123`` with 12 groups is group 12 and a 3, with 1 group group 1 and "23")."""
    if groups == 0:
        return replacement
    value = replacement
    position = 0
    while (match := _BACK_REFERENCE.search(value, position)) is not None:
        position = match.end()
        digits = match.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = match.start(1)
            value = value[: start - 1] + "\\" + value[start - 1 :]
            position += 1
    return value


def _java_replacement(replacement: str, match: re.Match) -> str:
    """Java's Matcher.appendReplacement: ``\\x`` is x, ``$n`` is group n (as many digits as
    still name a group), ``${name}`` a named group; a ``$`` otherwise is an error."""
    out = []
    index = 0
    groups = match.re.groups
    while index < len(replacement):
        char = replacement[index]
        if char == "\\":
            index += 1
            if index == len(replacement):
                raise NoMatchingRule("character to be escaped is missing in the replacement")
            out.append(replacement[index])
            index += 1
        elif char == "$":
            index += 1
            if index == len(replacement):
                raise NoMatchingRule("illegal group reference: group index is missing")
            if replacement[index] == "{":
                end = replacement.find("}", index)
                if end < 0:
                    raise NoMatchingRule("named capturing group is missing trailing '}'")
                try:
                    out.append(match.group(replacement[index + 1 : end]) or "")
                except IndexError:
                    raise NoMatchingRule(
                        f"no group with name {{{replacement[index + 1 : end]}}}"
                    ) from None
                index = end + 1
                continue
            if not replacement[index].isdigit():
                raise NoMatchingRule("illegal group reference")
            number = int(replacement[index])
            index += 1
            while index < len(replacement) and replacement[index].isdigit():
                longer = number * 10 + int(replacement[index])
                if longer > groups:
                    break
                number = longer
                index += 1
            if number > groups:
                raise NoMatchingRule(f"no group {number}")
            out.append(match.group(number) or "")
        else:
            out.append(char)
            index += 1
    return "".join(out)


class SslPrincipalMapper:
    """Kafka's SslPrincipalMapper: ``name(distinguished_name)`` by the first rule that applies."""

    def __init__(self, rules: str | None) -> None:
        self.rules = _parse_rules(_split_rules("DEFAULT" if rules is None else rules))

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRule(
            f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]"
        )

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def _split_rules(text: str) -> list[str]:
    """Kafka's splitRules: every match of RULE_SPLITTER, as Java's Matcher.find walks them
    (an empty match moves on by one character)."""
    text = text.strip()
    result = []
    position = 0
    while position <= len(text):
        match = _RULE_SPLITTER.search(text, position)
        if match is None:
            break
        result.append(match.group(1))
        position = match.end() if match.end() > match.start() else match.end() + 1
    return result


def _parse_rules(rules: list[str]) -> list[Rule]:
    result = []
    for text in rules:
        match = _RULE_PARSER.match(text)
        if match is None:
            raise ValueError(f"Invalid rule: {text}")
        if match.end() != len(text):
            raise ValueError(
                f"Invalid rule: `{text}`, unmatched substring: `{text[match.end() :]}`"
            )
        if match.group(1) is not None:
            result.append(Rule())
        elif match.group(2) is not None:
            try:
                result.append(
                    Rule(
                        match.group(2), match.group(4), match.group(6) == "L", match.group(6) == "U"
                    )
                )
            except re.error as error:
                raise ValueError(f"Invalid rule: `{text}`: {error}") from None
    return result
