// Helpers shared by the fuzz targets.
#pragma once

#include <cstdio>
#include <cstdlib>

// Fails the run (libFuzzer records the input as a crash) when an invariant of a
// successful parse does not hold: a parser that accepts must accept something sane.
#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
