"""Markup: a report as one self-contained HTML page (images inline as data: URIs, no script, no external
resource, readable without JavaScript) and as Markdown (images as links to PNGs beside it).

Text may hold code in backticks (`seeds: 6`, as Markdown writes it): Markdown keeps them, HTML sets them in
<code>, LaTeX in \\texttt, so no page shows a literal backtick.

Both are rendered from the same blocks: `Table` (formatted cells, optional group rows, bold cells),
`Image` (PNG bytes) and plain paragraphs, grouped in `Section`s, so they always carry the same content.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass

from ablate.components import Block as Block  # re-exported: the report's own sections build them from here
from ablate.components import Image as Image
from ablate.components import Table as Table


@dataclass
class Section:
    title: str
    blocks: list[Block]
    latex: bool = True
    """Whether tables.tex carries its tables (the Findings are the page's reading aid, not a paper's table)."""


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1280px;
  padding:0 1.2em;color:#1b1b1b}
h1{font-size:1.6em;margin-bottom:.2em}
h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0 1.4em;font-size:13px;font-variant-numeric:tabular-nums}
caption{caption-side:bottom;text-align:left;color:#555;font-size:12px;padding-top:.4em;max-width:1100px}
th,td{padding:3px 9px;border-bottom:1px solid #e4e4e4;vertical-align:top}
th{background:#f4f4f4;text-align:left;white-space:nowrap} td.num{text-align:right;white-space:nowrap}
td:first-child{min-width:9em}
tr.group th{background:#e9eef6;font-weight:600} strong{color:#0b4f9c}
img{max-width:100%;height:auto;display:block;margin:.5em 0 1.5em;border:1px solid #eee}
p.meta{color:#444;margin:.2em 0} .wrap{overflow-x:auto}
code{font:.92em ui-monospace,SFMono-Regular,Menlo,monospace;background:#f2f2f2;padding:0 .2em;border-radius:2px}
"""


CODE = re.compile(r"`([^`\n]+)`")
"""Code in text, as Markdown marks it."""


def _attr(text: str) -> str:
    return html.escape(text, quote=True)


def _e(text: str) -> str:
    """Text as HTML: escaped, its code in <code>."""
    return CODE.sub(r"<code>\1</code>", _attr(text))


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.header)
    body, group = [], None
    for i, row in enumerate(t.rows):
        if t.groups is not None and t.groups[i] != group:
            group = t.groups[i]
            body.append(f'<tr class="group"><th colspan="{len(t.header)}">{_e(group)}</th></tr>')
        cells = []
        for j, cell in enumerate(row):
            text = f"<strong>{_e(cell)}</strong>" if (i, j) in t.bold else _e(cell)
            if (i, j) in t.links:
                text = f'<a href="{_attr(t.links[i, j])}">{text}</a>'
            cells.append(f"<td>{text}</td>" if j < t.left else f'<td class="num">{text}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<div class="wrap"><table><caption>{_e(t.caption)}</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")  # fmt: skip


def _html_block(b: Block) -> str:
    if isinstance(b, Table):
        return _html_table(b)
    if isinstance(b, Image):
        data = base64.b64encode(b.png).decode("ascii")
        return f'<img src="data:image/png;base64,{data}" alt="{_attr(b.alt)}">'
    return f"<p>{_e(b)}</p>"


def html_page(title: str, meta: list[str], sections: list[Section]) -> str:
    """One self-contained page: inline CSS and images, no script."""
    parts = [f"<h1>{_e(title)}</h1>", *(f'<p class="meta">{_e(m)}</p>' for m in meta)]
    for s in sections:
        parts.append(f"<h2>{_e(s.title)}</h2>")
        parts.extend(_html_block(b) for b in s.blocks)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_attr(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>\n'
            f"<body>\n" + "\n".join(parts) + "\n</body></html>\n")  # fmt: skip


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ") or " "


def _md_table(t: Table) -> str:
    width = len(t.header)
    lines = ["| " + " | ".join(_md_cell(h) for h in t.header) + " |",
             "|" + "|".join(":---" if j < t.left else "---:" for j in range(width)) + "|"]  # fmt: skip
    group = None
    for i, row in enumerate(t.rows):
        if t.groups is not None and t.groups[i] != group:
            group = t.groups[i]
            lines.append("| " + " | ".join([f"**{_md_cell(group)}**"] + [" "] * (width - 1)) + " |")
        cells = [f"**{_md_cell(c)}**" if (i, j) in t.bold and c else _md_cell(c) for j, c in enumerate(row)]
        cells = [f"[{c}]({t.links[i, j]})" if (i, j) in t.links else c for j, c in enumerate(cells)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n*{_md_cell(t.caption)}*"


def _md_block(b: Block) -> str:
    if isinstance(b, Table):
        return _md_table(b)
    if isinstance(b, Image):
        return f"![{b.alt}]({b.name}.png)"
    return b


def markdown(title: str, meta: list[str], sections: list[Section]) -> str:
    """The same content in Markdown; images link to `<name>.png` beside the file."""
    parts = [f"# {title}", "\n\n".join(meta)]
    for s in sections:
        parts.append(f"## {s.title}")
        parts.extend(_md_block(b) for b in s.blocks)
    return "\n\n".join(parts) + "\n"


#: Characters LaTeX reads as commands or prints as another glyph (`|` is a dash in its default font encoding),
#: and the non-ASCII words of the reports, as LaTeX.
LATEX = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$", "Δ": r"$\Delta$", "α": r"$\alpha$",
    "≥": r"$\geq$", "≤": r"$\leq$", "×": r"$\times$", "·": r"$\cdot$", "†": r"$^\dagger$", "‡": r"$^\ddagger$",
    "♢": r"$\diamond$", "…": r"\ldots{}", "²": r"$^2$", "–": "--", "—": "---", "≈": r"$\approx$", "κ": r"$\kappa$",
    "β": r"$\beta$", "γ": r"$\gamma$", "τ": r"$\tau$", "μ": r"$\mu$", "<": r"$<$", ">": r"$>$", "*": r"$^*$",
    "|": r"\textbar{}",
}  # fmt: skip


def tex(text: str) -> str:
    """Text as LaTeX source: special characters escaped, the reports' symbols in math mode, any other
    non-ASCII character dropped (pdflatex would stop on it), code in \\texttt."""
    parts = CODE.split(text)  # text, code, text, ...
    return "".join(rf"\texttt{{{_tex_plain(p)}}}" if i % 2 else _tex_plain(p) for i, p in enumerate(parts))


TEX_SPECIAL = re.compile("[" + re.escape("".join(c for c in LATEX if c.isascii())) + r"]|[^\x00-\x7f]")
"""The characters `_tex_plain` replaces: LaTeX's special ASCII and any non-ASCII one. Only they go through
Python (a report's tables are thousands of cells of mostly plain ASCII)."""


def _tex_plain(text: str) -> str:
    return TEX_SPECIAL.sub(lambda m: LATEX.get(m[0], ""), text)


def _tex_table(t: Table) -> str:
    """A booktabs table: caption above, group rows as spanning italic rows, bold cells in \\textbf."""
    width = len(t.header)
    spec = "l" * min(t.left, width) + "r" * (width - min(t.left, width))
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{tex(t.caption)}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(rf"\textbf{{{tex(h)}}}" for h in t.header) + r" \\", r"\midrule"]  # fmt: skip
    group = None
    for i, row in enumerate(t.rows):
        if t.groups is not None and t.groups[i] != group:
            if group is not None:
                lines.append(r"\midrule")
            group = t.groups[i]
            lines.append(rf"\multicolumn{{{width}}}{{l}}{{\emph{{{tex(group)}}}}} \\")
        cells = [rf"\textbf{{{tex(c)}}}" if (i, j) in t.bold and c else tex(c) for j, c in enumerate(row)]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines)


def latex(title: str, meta: list[str], sections: list[Section]) -> str:
    """The report's tables as a LaTeX document (booktabs; figures stay in the PNGs): each table is a
    `table` environment to paste into a paper, the document around them compiles on its own."""
    parts = [r"\documentclass{article}", r"\usepackage[margin=1.5cm,landscape]{geometry}", r"\usepackage{booktabs}",
             r"\begin{document}", rf"\section*{{{tex(title)}}}", *(tex(m) + "\n" for m in meta),
             *latex_tables(sections), r"\end{document}"]  # fmt: skip
    return "\n".join(parts) + "\n"


def latex_tables(sections: list[Section]) -> list[str]:
    """The tables of `sections` (those whose `latex` holds) as LaTeX, each section's under its title: the body of
    tables.tex, and of methods.tex (`ablate.reporting.methods`) after its paragraph."""
    parts = []
    for s in sections:
        tables = [b for b in s.blocks if isinstance(b, Table) and s.latex]
        if tables:
            parts.append(rf"\subsection*{{{tex(s.title)}}}")
            parts += [_tex_table(b) for b in tables]
    return parts
