"""(stage docstring)"""
