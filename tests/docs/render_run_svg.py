"""Renders the live view of a real `baton run` as an SVG for the README.

Runs the `baton` binary on a pseudo-terminal (util-linux `script`, 80
columns) against a running `baton up`, replays what it printed the way a
terminal shows it (carriage returns redraw the line, `ESC[2K` clears it),
and writes the final screen as monospace text in an SVG:

    baton up &    # in another terminal
    python3 tests/docs/render_run_svg.py target/release/baton docs/run.svg
"""

import html
import os
import re
import subprocess
import sys

COLUMNS = 80


def screen(raw: str) -> list[str]:
    lines, current = [], ""
    for piece in re.split(r"(\r\n|\n|\r|\x1b\[2K)", raw):
        if piece in ("\r\n", "\n"):
            lines.append(current)
            current = ""
        elif piece in ("\r", "\x1b[2K"):
            # A redraw: the line starts again.
            current = ""
        else:
            current += re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", piece)
    if current:
        lines.append(current)
    return lines


def main(baton: str, out: str) -> None:
    command = f"{baton} run researcher 'the history of Rust'"
    env = dict(os.environ, COLUMNS=str(COLUMNS), NO_COLOR="1")
    # Bytes, decoded here: text mode would turn the redraws' \r into \n.
    raw = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, check=True,
    ).stdout.decode()
    lines = ["$ baton run researcher \"the history of Rust\""] + screen(raw)
    char_w, line_h, pad = 8.4, 18, 14
    width = int(COLUMNS * char_w + 2 * pad)
    height = int(len(lines) * line_h + 2 * pad)
    rows = "\n".join(
        f'  <text x="{pad}" y="{pad + (i + 1) * line_h - 4}" xml:space="preserve">{html.escape(line)}</text>'
        for i, line in enumerate(lines)
    )
    svg = f"""<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">
  <title>baton run researcher: the live view (rendered from the CLI's real output by tests/docs/render_run_svg.py)</title>
  <rect width="100%" height="100%" rx="6" fill="#1e1e1e"/>
  <g font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="14" fill="#d4d4d4">
{rows}
  </g>
</svg>
"""
    with open(out, "w") as f:
        f.write(svg)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
