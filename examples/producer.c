/* A small "foreign library" for the demo: it owns some tensors and hands them out through DLPack,
 * the way a C or C++ numerics library would. The structs are declared here from the DLPack spec
 * (the demo must not depend on libdlpack's internals). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { uint32_t major, minor; } Version;
typedef struct { int32_t device_type, device_id; } Device;
typedef struct { uint8_t code, bits; uint16_t lanes; } DataType;
typedef struct {
  void *data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} Tensor;
typedef struct ManagedLegacy {
  Tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct ManagedLegacy *);
} ManagedLegacy;
typedef struct ManagedVersioned {
  Version version;
  void *manager_ctx;
  void (*deleter)(struct ManagedVersioned *);
  uint64_t flags;
  Tensor dl_tensor;
} ManagedVersioned;

_Static_assert(sizeof(Tensor) == 48, "DLTensor is 48 bytes");
_Static_assert(sizeof(ManagedVersioned) == 80, "DLManagedTensorVersioned is 80 bytes");

enum { READ_ONLY = 1 };

/* Every tensor lives in one block: struct, shape, strides, data. */
typedef struct {
  ManagedVersioned versioned;
  ManagedLegacy legacy;
  int64_t shape[4];
  int64_t strides[4];
  double data[64];
} Block;

static int live_tensors = 0;

static void free_versioned(ManagedVersioned *self) { free(self->manager_ctx); live_tensors--; }
static void free_legacy(ManagedLegacy *self) { free(self->manager_ctx); live_tensors--; }

static Block *new_block(void) {
  Block *b = calloc(1, sizeof(Block));
  if (b) live_tensors++;
  return b;
}

/* A 2x3 float32 matrix [[0,1,2],[10,11,12]], C order, versioned, writable. */
void *producer_matrix(void) {
  Block *b = new_block();
  if (!b) return NULL;
  float *values = (float *)b->data;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) values[i * 3 + j] = (float)(i * 10 + j);
  b->shape[0] = 2; b->shape[1] = 3;
  b->strides[0] = 3; b->strides[1] = 1;
  b->versioned = (ManagedVersioned){
    .version = {1, 3}, .manager_ctx = b, .deleter = free_versioned, .flags = 0,
    .dl_tensor = {.data = values, .device = {1, 0}, .ndim = 2, .dtype = {2, 32, 1},
                  .shape = b->shape, .strides = b->strides, .byte_offset = 0}};
  return &b->versioned;
}

/* The same kind of matrix seen transposed (3x2, strides 1,3) through the legacy struct, and read-only
 * data of int64 counting down through a negative stride, starting 16 bytes into the buffer. */
void *producer_transposed_legacy(void) {
  Block *b = new_block();
  if (!b) return NULL;
  float *values = (float *)b->data;
  for (int k = 0; k < 6; k++) values[k] = (float)k;
  b->shape[0] = 3; b->shape[1] = 2;
  b->strides[0] = 1; b->strides[1] = 3;
  b->legacy = (ManagedLegacy){
    .dl_tensor = {.data = values, .device = {1, 0}, .ndim = 2, .dtype = {2, 32, 1},
                  .shape = b->shape, .strides = b->strides, .byte_offset = 0},
    .manager_ctx = b, .deleter = free_legacy};
  return &b->legacy;
}

void *producer_countdown(void) {
  Block *b = new_block();
  if (!b) return NULL;
  int64_t *values = (int64_t *)b->data;
  for (int k = 0; k < 5; k++) values[k] = 100 + k;
  b->shape[0] = 5;
  b->strides[0] = -1;
  b->versioned = (ManagedVersioned){
    .version = {1, 3}, .manager_ctx = b, .deleter = free_versioned, .flags = READ_ONLY,
    .dl_tensor = {.data = values, .device = {1, 0}, .ndim = 1, .dtype = {0, 64, 1},
                  .shape = b->shape, .strides = b->strides, .byte_offset = 4 * sizeof(int64_t)}};
  return &b->versioned;
}

/* A malformed tensor: the float6 code with 8 bits. A careful consumer refuses it and still gives it
 * back through the deleter. */
void *producer_malformed(void) {
  Block *b = new_block();
  if (!b) return NULL;
  b->shape[0] = 4;
  b->versioned = (ManagedVersioned){
    .version = {1, 3}, .manager_ctx = b, .deleter = free_versioned, .flags = 0,
    .dl_tensor = {.data = b->data, .device = {1, 0}, .ndim = 1, .dtype = {15, 8, 1},
                  .shape = b->shape, .strides = NULL, .byte_offset = 0}};
  return &b->versioned;
}

int producer_live_tensors(void) { return live_tensors; }
