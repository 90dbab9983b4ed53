"""Tests of the Data Guarantee service."""
