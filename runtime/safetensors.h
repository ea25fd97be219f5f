/* safetensors.h — a strict reader of Hugging Face safetensors files: memory-mapped, the JSON
 * header parsed with cJSON and checked (dtype, shape, offsets inside the data, no overlaps, no
 * duplicate names) so a bad file gives one error naming the file and the tensor. */
#ifndef KT_SAFETENSORS_H
#define KT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum kt_st_dtype {
    KT_ST_BOOL = 0,
    KT_ST_U8,
    KT_ST_I8,
    KT_ST_F8_E4M3,
    KT_ST_F8_E5M2,
    KT_ST_F8_E8M0,
    KT_ST_I16,
    KT_ST_U16,
    KT_ST_F16,
    KT_ST_BF16,
    KT_ST_I32,
    KT_ST_U32,
    KT_ST_F32,
    KT_ST_I64,
    KT_ST_U64,
    KT_ST_F64,
    KT_ST_N_DTYPES
} kt_st_dtype;

#define KT_ST_MAX_DIMS 8

typedef struct kt_st_tensor {
    char *name;
    kt_st_dtype dtype;
    int ndim;
    long shape[KT_ST_MAX_DIMS];
    size_t begin, end; /* byte offsets in the file's data section */
    const void *data;  /* into the mapping (NULL for a header parsed without data) */
    int file;          /* index into kt_st_set.files */
} kt_st_tensor;

typedef struct kt_st_file {
    char *path;
    void *map;
    size_t size;
} kt_st_file;

/* Every tensor of a model folder (one file or shards), sorted by name. */
typedef struct kt_st_set {
    kt_st_file *files;
    int n_files;
    kt_st_tensor *tensors;
    int n_tensors;
} kt_st_set;

/* The name safetensors writes for a dtype ("BF16"), and its element size in bytes. */
const char *kt_st_dtype_name(kt_st_dtype d);
size_t kt_st_dtype_size(kt_st_dtype d);

/* Parses a header (the JSON text after the 8-byte length) of a file whose data section has
 * data_len bytes; appends its tensors to *t (*n of them, *cap allocated) with file index `file`.
 * Checks every entry; name is the file for messages. */
int kt_st_parse_header(const char *name, const char *json, size_t len, size_t data_len, int file, kt_st_tensor **t,
                       int *n, size_t *cap);
/* Opens one file (mmap) into s; its tensors' data pointers point into the mapping. */
int kt_st_open_file(kt_st_set *s, const char *path);
/* Opens DIR: model.safetensors, or every *.safetensors in it (shards), sorted; checks that no
 * tensor name appears twice across files. */
int kt_st_open_dir(kt_st_set *s, const char *dir);
void kt_st_close(kt_st_set *s);

/* The tensor called name (binary search), NULL if absent. */
const kt_st_tensor *kt_st_find(const kt_st_set *s, const char *name);
/* The tensor called name, checked against ndim/shape; -1 naming file and tensor if it is
 * missing or its shape differs. */
int kt_st_get(const kt_st_set *s, const char *name, int ndim, const long *shape, const kt_st_tensor **out);
/* The file of a tensor (for messages). */
const char *kt_st_file_of(const kt_st_set *s, const kt_st_tensor *t);
/* Converts a float tensor (F32, BF16, F16, F8_E4M3, F8_E8M0 scales) to f32 into out (numel elements). */
int kt_st_to_f32(const kt_st_set *s, const kt_st_tensor *t, float *out);
/* Converts an integer tensor (I64, I32, U8...) to int32 into out; a value out of int32 range fails. */
int kt_st_to_i32(const kt_st_set *s, const kt_st_tensor *t, int32_t *out);
/* Elements of a tensor. */
size_t kt_st_numel(const kt_st_tensor *t);

#endif
