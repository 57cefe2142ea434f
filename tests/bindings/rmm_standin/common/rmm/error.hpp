// SPDX-License-Identifier: Apache-2.0
// Stand-in for RMM's include/rmm/error.hpp, the same in 25.08 and 26.06: the
// exception types (logic_error, cuda_error, bad_alloc with "std::bad_alloc: "
// before the message, out_of_memory with "out_of_memory: " before it,
// out_of_range).
#ifndef GPUALLOC_STANDIN_RMM_ERROR_HPP_
#define GPUALLOC_STANDIN_RMM_ERROR_HPP_

#include <new>
#include <stdexcept>
#include <string>

namespace rmm {

struct logic_error : public std::logic_error {
  using std::logic_error::logic_error;
};

struct cuda_error : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

class bad_alloc : public std::bad_alloc {
 public:
  bad_alloc(const char* msg)
      : _what{std::string{std::bad_alloc::what()} + ": " + msg} {}
  bad_alloc(std::string const& msg) : bad_alloc{msg.c_str()} {}
  [[nodiscard]] const char* what() const noexcept override {
    return _what.c_str();
  }

 private:
  std::string _what;
};

class out_of_memory : public bad_alloc {
 public:
  out_of_memory(const char* msg)
      : bad_alloc{std::string{"out_of_memory: "} + msg} {}
  out_of_memory(std::string const& msg) : out_of_memory{msg.c_str()} {}
};

class out_of_range : public std::out_of_range {
  using std::out_of_range::out_of_range;
};

}  // namespace rmm

#endif  // GPUALLOC_STANDIN_RMM_ERROR_HPP_
