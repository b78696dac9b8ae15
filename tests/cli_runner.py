"""Run braidpy's command line inside the test process (no interpreter start)."""


def in_process(capsys, *args):
    """(status, stdout, stderr) of braidpy.cli.main with ``args``; argparse's exit on
    bad options becomes the status."""
    from braidpy.cli import main

    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse: bad options
        status = exc.code
    out = capsys.readouterr()
    return status, out.out, out.err
