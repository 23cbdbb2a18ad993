"""Django integration for durabl (settings, management commands, admin).

Not built yet: this package only reserves the name. See the project's roadmap.
"""
