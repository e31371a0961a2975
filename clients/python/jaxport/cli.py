"""The `jaxport` command: dispatches to export/verify/serve/infer, importing each lazily."""
import sys
def main(argv=None):
    print("stub")
