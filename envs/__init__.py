"""Environment families; each subpackage registers its ids when imported."""
