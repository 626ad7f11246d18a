#include <time.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <sys/mman.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx512f"))) static float sum512(const float*p,size_t n){
  __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0,a4=a0,a5=a0,a6=a0,a7=a0;
  for(size_t i=0;i<n;i+=128){a0=_mm512_add_ps(a0,_mm512_load_ps(p+i));a1=_mm512_add_ps(a1,_mm512_load_ps(p+i+16));
  a2=_mm512_add_ps(a2,_mm512_load_ps(p+i+32));a3=_mm512_add_ps(a3,_mm512_load_ps(p+i+48));
  a4=_mm512_add_ps(a4,_mm512_load_ps(p+i+64));a5=_mm512_add_ps(a5,_mm512_load_ps(p+i+80));
  a6=_mm512_add_ps(a6,_mm512_load_ps(p+i+96));a7=_mm512_add_ps(a7,_mm512_load_ps(p+i+112));}
  a0=_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)),_mm512_add_ps(_mm512_add_ps(a4,a5),_mm512_add_ps(a6,a7)));
  return _mm512_reduce_add_ps(a0);}
__attribute__((target("avx2"))) static float sum256(const float*p,size_t n){
  __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0,a4=a0,a5=a0,a6=a0,a7=a0;
  for(size_t i=0;i<n;i+=64){a0=_mm256_add_ps(a0,_mm256_load_ps(p+i));a1=_mm256_add_ps(a1,_mm256_load_ps(p+i+8));
  a2=_mm256_add_ps(a2,_mm256_load_ps(p+i+16));a3=_mm256_add_ps(a3,_mm256_load_ps(p+i+24));
  a4=_mm256_add_ps(a4,_mm256_load_ps(p+i+32));a5=_mm256_add_ps(a5,_mm256_load_ps(p+i+40));
  a6=_mm256_add_ps(a6,_mm256_load_ps(p+i+48));a7=_mm256_add_ps(a7,_mm256_load_ps(p+i+56));}
  float o[8];_mm256_storeu_ps(o,_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0,a1),_mm256_add_ps(a2,a3)),_mm256_add_ps(_mm256_add_ps(a4,a5),_mm256_add_ps(a6,a7))));
  return o[0]+o[1]+o[2]+o[3]+o[4]+o[5]+o[6]+o[7];}
int main(int argc,char**argv){
  size_t bytes=(size_t)atol(argv[1])<<20; int huge=atoi(argv[2]);
  float*p=aligned_alloc(2<<20,bytes); if(huge) madvise(p,bytes,MADV_HUGEPAGE);
  size_t n=bytes/4;
  #pragma omp parallel for schedule(static)
  for(size_t i=0;i<n;i++)p[i]=1.0f;
  for(int w=0;w<2;w++){ double best=1e9; for(int r=0;r<5;r++){ double t=now(); float tot=0;
    #pragma omp parallel reduction(+:tot)
    { int T=omp_get_num_threads(),id=omp_get_thread_num(); size_t c=n/T; c-=c%128; const float*q=p+id*c;
      tot+= w? sum512(q,c):sum256(q,c);}
    double d=now()-t; if(d<best)best=d; if(tot<0)puts("x");}
    printf("%s threads=%d huge=%d MiB=%zu best GB/s %.2f\n", w?"avx512":"avx2", omp_get_max_threads(),huge,bytes>>20,bytes/best/1e9);}
}
