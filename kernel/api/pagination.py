from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=``; 100 per page by default, 1,000 at most."""

    default_limit = 100
    max_limit = 1000
