"""An app whose ``jobs`` module raises on import (for check durabl.E004). Not installed."""
