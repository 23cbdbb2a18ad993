"""The MongoDB backend. Only this package imports pymongo and bson."""

from durabl.stores.mongo.backend import MongoJobQueue

__all__ = ["MongoJobQueue"]
