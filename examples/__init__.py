"""Numbered braidpy examples; each one runs as a script and its app class can be imported.

With the repository root on ``sys.path``::

    from examples.ex01_scalar_ode import ScalarODE
    from examples.ex02_heat1d import Heat1D
"""
