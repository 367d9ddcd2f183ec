// trace_distances: the mean pairwise spot distance of every trace on one chromosome of a
// ChromData store, with the C++17 wrapper deltacells.hpp and no Arrow library.
//
//   trace_distances STORE CHROM
//
// STORE is a *.chromdata.zarr directory or a .cdz file; CHROM a chromosome name (as in the
// store's bins). Prints one line per trace, in the order the query returns them:
//
//   trace_id <TAB> spots <TAB> spots with coordinates <TAB> mean pairwise distance
//
// (the distance in the store's coordinate unit, "NA" for fewer than two located spots).
// Missing coordinates are NaN in ChromData; those spots count as spots but not in distances.
#include <deltacells.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace dc = deltacells;

struct Trace {
  std::vector<double> x, y, z; // located spots only
  long spots = 0;
};

// The id of row r as text: trace ids are utf8, or int64 for integer-typed categories.
static std::string id_at(const dc::Column &c, int64_t r) {
  if (c.is_string()) return std::string(c.str(r));
  return std::to_string(c.values<int64_t>()[static_cast<size_t>(r)]);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s STORE CHROM\n", argv[0]);
    return 2;
  }
  try {
    dc::ChromData store(argv[1]);
    if (!store.info().has_coords) {
      std::fprintf(stderr, "%s: the store has no coordinates\n", argv[1]);
      return 1;
    }
    std::vector<std::string> order; // traces in the order of the result
    std::map<std::string, Trace> traces;
    // "coords": the keys and x, y, z only (the store reads nothing else).
    dc::BatchReader reader(store.get_chrom(argv[2], {"coords"}));
    for (const dc::Batch &batch : reader) {
      dc::Column trace_id = batch.column("trace_id");
      // float64 coordinates, or float32 in stores written with DC_CDW_COORD_FLOAT32
      bool f32 = batch.column("x").is<float>();
      auto coord = [&](const char *axis, size_t r) -> double {
        return f32 ? batch.column<float>(axis)[r] : batch.column<double>(axis)[r];
      };
      for (int64_t r = 0; r < batch.num_rows(); r++) {
        std::string id = id_at(trace_id, r);
        auto [it, fresh] = traces.try_emplace(id);
        if (fresh) order.push_back(id);
        Trace &t = it->second;
        t.spots++;
        size_t i = static_cast<size_t>(r);
        double x = coord("x", i), y = coord("y", i), z = coord("z", i);
        if (std::isnan(x) || std::isnan(y) || std::isnan(z)) continue;
        t.x.push_back(x);
        t.y.push_back(y);
        t.z.push_back(z);
      }
    }
    for (const std::string &id : order) {
      const Trace &t = traces[id];
      size_t n = t.x.size();
      double sum = 0;
      for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
          sum += std::sqrt((t.x[a] - t.x[b]) * (t.x[a] - t.x[b]) + (t.y[a] - t.y[b]) * (t.y[a] - t.y[b]) +
                           (t.z[a] - t.z[b]) * (t.z[a] - t.z[b]));
      if (n < 2) std::printf("%s\t%ld\t%zu\tNA\n", id.c_str(), t.spots, n);
      else std::printf("%s\t%ld\t%zu\t%.6f\n", id.c_str(), t.spots, n, sum / (double(n) * double(n - 1) / 2));
    }
  } catch (const dc::error &e) {
    std::fprintf(stderr, "%s\n", e.what()); // e.g. dc_chromdata_get_chrom: DC_ERR_NOT_FOUND: ...
    return 1;
  }
  return 0;
}
