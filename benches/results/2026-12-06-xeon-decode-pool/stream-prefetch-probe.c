#include <time.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx512f"))) static float sum512(const float*p,size_t n,size_t ahead){
  __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0,a4=a0,a5=a0,a6=a0,a7=a0;
  for(size_t i=0;i<n;i+=128){
  if(ahead){ for(int l=0;l<8;l++) _mm_prefetch((const char*)(p+i+ahead+16*l),_MM_HINT_T1);}
  a0=_mm512_add_ps(a0,_mm512_load_ps(p+i));a1=_mm512_add_ps(a1,_mm512_load_ps(p+i+16));
  a2=_mm512_add_ps(a2,_mm512_load_ps(p+i+32));a3=_mm512_add_ps(a3,_mm512_load_ps(p+i+48));
  a4=_mm512_add_ps(a4,_mm512_load_ps(p+i+64));a5=_mm512_add_ps(a5,_mm512_load_ps(p+i+80));
  a6=_mm512_add_ps(a6,_mm512_load_ps(p+i+96));a7=_mm512_add_ps(a7,_mm512_load_ps(p+i+112));}
  a0=_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)),_mm512_add_ps(_mm512_add_ps(a4,a5),_mm512_add_ps(a6,a7)));
  return _mm512_reduce_add_ps(a0);}
int main(int argc,char**argv){
  size_t bytes=(size_t)512<<20; float*p=aligned_alloc(2<<20,bytes); size_t n=bytes/4;
  #pragma omp parallel for schedule(static)
  for(size_t i=0;i<n;i++)p[i]=1.0f;
  size_t aheads[]={0,256,512,1024,2048,4096}; double best[6]; for(int w=0;w<6;w++)best[w]=1e9;
  for(int r=0;r<10;r++) for(int w=0;w<6;w++){ double t=now(); float tot=0;
    #pragma omp parallel reduction(+:tot)
    { int T=omp_get_num_threads(),id=omp_get_thread_num(); size_t c=n/T; c-=c%128; const float*q=p+id*c;
      tot+= sum512(q,c,aheads[w]);}
    double d=now()-t; if(d<best[w])best[w]=d; if(tot<0)puts("x");}
  for(int w=0;w<6;w++) printf("ahead %zu floats (%zu B): best GB/s %.2f\n", aheads[w], aheads[w]*4, bytes/best[w]/1e9);
}
