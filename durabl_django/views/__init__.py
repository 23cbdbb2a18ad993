"""The admin's pages, one module per page or group of pages, each view taking the
ModelAdmin that mounts it (for the admin's context, URLs and breadcrumbs):

- :mod:`~durabl_django.views.lists`: the job list of each status;
- :mod:`~durabl_django.views.detail`: a job's page;
- :mod:`~durabl_django.views.overview` (with :mod:`~durabl_django.views.charts`): the
  queue overview, also the section's landing page;
- :mod:`~durabl_django.views.registry`: the workers and the schedules;
- :mod:`~durabl_django.views.common`: what they share.

Retry, cancel, delete and run now live in :mod:`durabl_django.admin_actions`.
"""
