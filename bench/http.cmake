# HTTP middleware benchmarks: the CPU cost of Middleware::Check beside the bare
# Limiter::Acquire. bench/http_overhead.sh runs it together with the wrk comparison.
find_package(benchmark REQUIRED)
add_executable(sluice_http_middleware_bench ${CMAKE_CURRENT_LIST_DIR}/http_middleware_bench.cc)
target_link_libraries(sluice_http_middleware_bench PRIVATE sluice::http benchmark::benchmark)
target_compile_options(sluice_http_middleware_bench PRIVATE -Wno-missing-field-initializers)
