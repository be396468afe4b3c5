"""`python -m masdsl.testing FOLDER`: build the tiny random model into FOLDER and print the folder
(`masdsl.testing.tiny.main`; docs/extending.md, "A two-minute experiment")."""

from masdsl.testing.tiny import main

if __name__ == "__main__":
    raise SystemExit(main())
