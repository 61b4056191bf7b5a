"""What the readiness check returns: :class:`Finding`, :class:`Report` and :class:`NotReady`."""

from __future__ import annotations

import html
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

SEVERITIES = ("error", "warning", "note")  # error: fails on a TPU; warning: slow or wrong; note

# The HTML labels' backgrounds, under white text: a label brings its own background, so the
# notebook's theme cannot lower its contrast (WCAG AA, 4.5:1; the tests compute the ratios).
LABEL_COLOURS = {"error": "#b3261e", "warning": "#8a4600", "note": "#5f6368", "clean": "#137333"}
# Called with no arguments each time assert_clean() passes (a notebook runner counts them).
WHEN_CLEAN: list = []


@dataclass(frozen=True)
class Finding:
    """One problem: what, where, why it matters on a TPU, and the fix."""

    code: str
    severity: str
    what: str
    where: str
    why: str
    fix: str

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")


class NotReady(AssertionError):
    """Raised by :meth:`Report.assert_clean`; the message lists the problems."""


@dataclass
class Report:
    """The findings of :func:`check`: text when printed, a table in a notebook."""

    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def problems(self) -> list[Finding]:
        """Errors and warnings: what makes the report unclean."""
        return [f for f in self.findings if f.severity != "note"]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "note"]

    @property
    def codes(self) -> set[str]:
        """The codes of every finding, notes included."""
        return {f.code for f in self.findings}

    @property
    def clean(self) -> bool:
        """No errors or warnings in what was checked (:attr:`complete`: was it everything)."""
        return not self.problems

    @property
    def complete(self) -> bool:
        """Every part was checked: nothing in :attr:`skipped`."""
        return not self.skipped

    def add(self, code: str, severity: str, what: str, where: str, why: str, fix: str) -> None:
        self.findings.append(Finding(code, severity, what, where, why, fix))

    def find(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]

    def assert_clean(self, allow: Iterable[str] = ()) -> Report:
        """Raise :class:`NotReady` unless every error and warning has a code in ``allow``."""
        allow = set(allow)
        left = [f for f in self.problems if f.code not in allow]
        if left:
            shown = Report(left, self.checked, self.skipped, self.stats)
            raise NotReady(shown.text(notes=False))
        for hook in WHEN_CLEAN:
            hook()
        return self

    def summary(self, name_skipped: bool = True) -> str:
        """The one-line verdict: "clean" only when nothing was skipped, else "no problems found
        in what was checked" and (``name_skipped``) each part skipped and why."""
        context = self._context()
        if self.clean:
            extra = f"; {len(self.notes)} note(s) in report.notes" if self.notes else ""
            if self.complete:
                return f"TPU readiness: clean, no problems found ({context}{extra})"
            found = f"TPU readiness: no problems found in what was checked ({context}{extra})"
            return f"{found}; not checked: {'; '.join(self.skipped)}" if name_skipped else found
        counts = [
            f"{n} {sev}{'s' if n > 1 else ''}"
            for sev in SEVERITIES
            if (n := sum(f.severity == sev for f in self.findings))
        ]
        return f"TPU readiness: {', '.join(counts)} ({context})"

    def _context(self) -> str:
        parts = [f"checked {', '.join(self.checked)}" if self.checked else "nothing checked"]
        if "replicas" in self.stats:
            parts.append(f"{self.stats['replicas']} replica(s)")
        if self.stats.get("global_batch") is not None:
            parts.append(f"global batch {self.stats['global_batch']}")
        if self.stats.get("compiled_for", "TPU") != "TPU":  # a TPU's XLA may still refuse it
            parts.append(f"XLA compiled for the {self.stats['compiled_for']}, not a TPU")
        if self.skipped and not self.clean:  # a clean summary names each one itself
            parts.append(f"{len(self.skipped)} part(s) not checked, see report.skipped")
        return "; ".join(parts)

    def text(self, notes: bool = True, width: int = 100) -> str:
        """The report as plain text: the summary line, then one block per finding."""
        lines = [self.summary()]
        shown = self.findings if notes else self.problems
        for i, f in enumerate(shown, 1):
            lines.append(f"{i}. [{f.severity}] {f.what}  ({f.code})")
            for label, value in (("where", f.where), ("why", f.why), ("fix", f.fix)):
                lines += textwrap.wrap(
                    value, width, initial_indent=f"   {label + ':':<7}", subsequent_indent=" " * 10
                )
        if not self.clean:  # a problem-free summary names the skipped parts itself
            lines += [f"   (skipped: {reason})" for reason in self.skipped]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text(notes=not self.clean)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        head = html.escape(self.summary(name_skipped=False))  # the list below names them
        if self.clean and self.complete:
            return f"<div>{_label('clean', head)}</div>"
        rows = "".join(
            f"<tr><td>{i}</td><td>{_label(f.severity, f.severity)}</td>"
            + "".join(
                f'<td style="text-align:left">{html.escape(v)}</td>'
                for v in (f.what, f.where, f.why, f.fix)
            )
            + f"<td><code>{f.code}</code></td></tr>"
            for i, f in enumerate(self.findings, 1)
        )
        skipped = "".join(f"<li>{html.escape(s)}</li>" for s in self.skipped)
        table = (
            "<table><tr><th>#</th><th>severity</th><th>what</th><th>where</th>"
            f"<th>why it matters on a TPU</th><th>fix</th><th>code</th></tr>{rows}</table>"
            if self.findings
            else ""
        )
        not_checked = f"<small>not checked:<ul>{skipped}</ul></small>" if skipped else ""
        return f"<div><b>{head}</b>{table}{not_checked}</div>"


def _label(kind: str, text: str) -> str:
    """A bold white label on its own background (:data:`LABEL_COLOURS`), readable on any theme."""
    return (
        f'<span style="color:#ffffff;background:{LABEL_COLOURS[kind]};font-weight:bold;'
        f'padding:0 0.3em;border-radius:3px">{text}</span>'
    )
