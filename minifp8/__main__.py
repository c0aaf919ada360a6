"""``python -m minifp8``: the package's commands, for whoever types the package's name."""
import sys

from ._cli import exit_status_of

COMMANDS = {
    "minifp8.train_tiny": "train the mini-GPT under the FP8 recipes (the main job; -h for its flags)",
    "minifp8.golden": "write golden-vector files for testing a backend in another language",
    "minifp8.bench": "time minifp8 against baselines measured in the same run",
    "minifp8.explain": "explain how one number encodes in a format (or what one code means)",
}


def main(argv=None) -> int:
    """Print the commands; 0 for no argument or ``-h``, 2 (with the list on stderr) for any other."""
    argv = sys.argv[1:] if argv is None else argv
    lines = ["minifp8 is run through its modules:"]
    lines += [f"  python -m {command:<20} {what}" for command, what in COMMANDS.items()]
    ok = argv in ([], ["-h"], ["--help"])
    print("\n".join(lines if ok else [f"python -m minifp8: unknown arguments {' '.join(argv)}", *lines]),
          file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(exit_status_of(main))  # (status 141, quietly, under `| head`)
