"""The MongoDB backend. Only this package imports pymongo and bson."""

from durabl.mongo.backend import MongoJobQueue

__all__ = ["MongoJobQueue"]
